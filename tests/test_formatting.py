"""Numbers for people (tracekit.formatting): the issue's own bad examples, each as it must read."""

from __future__ import annotations

import math

import pytest

from tracekit import formatting as fmt


@pytest.mark.parametrize(("v", "unit", "text"), [
    (0.9186077336953127, "fraction", "91.9%"),  # was 0.9186077336953127 on the dashboard
    (1707.0, "count", "1,707"),  # was 1,707.000 in the report
    (77773.216, "ms", "77.8 s"),  # was 77773.216 ms
    (329342.936, "us", "329 ms"),  # was mean_us 329,342.936
    (6.611, "ms", "6.61 ms"),  # the unit once (was 6.611 ms ms)
    (412, "ns", "412 ns"),
    (3.2149, "us", "3.21 µs"),
    (150e9, "ns", "2.50 min"),
    (15.0, "ms", "15.0 ms"),  # one precision down a column: 15.0 next to 24.7
    (0.000123, "fraction", "0.0123%"),
    (7.04e-9, "fraction", "<0.001%"),  # was 7.04e-07%
    (1.0, "fraction", "100%"),
    (0.15, "fraction", "15.0%"),
    (0.99996, "fraction", "100%"),
    (0.0, "fraction", "0%"),  # a measured zero is 0 …
    (None, "fraction", "—"),  # … and unknown is not
    (float("nan"), "ms", "—"),
    (729.49, "GB/s", "729 GB/s"),
    (0.22183, "TFLOP/s", "0.222 TFLOP/s"),
    (7.7087, "x", "7.71×"),
    (8.03e9, "bytes", "8.03 GB"),
    (168.47, "count", "168"),  # a mean count keeps 3 significant digits
    (0.0, "flag", "no"),
    (1.234, "USD/1M tokens", "$1.23 per 1M tokens"),
    (0.0123, "USD/1M tokens", "$0.0123 per 1M tokens"),
    (12345.6, "tokens/s", "12,346 tokens/s"),
    (2.0, "", "2"),
])
def test_value(v: float | None, unit: str, text: str) -> None:
    assert fmt.value(v, unit) == text


def test_significant_digits_are_fixed() -> None:
    column = [fmt.significant(x) for x in (1.23456, 12.3456, 123.456, 0.0123456)]
    assert column == ["1.23", "12.3", "123", "0.0123"]
    assert fmt.significant(1e-9) == "1.00e-09" and fmt.significant(math.inf) == "∞"
    assert fmt.significant(9.996) == "10.0" and fmt.significant(2.0) == "2.00"


def test_labels_are_words() -> None:
    assert fmt.label("device_busy_fraction") == "Device busy"
    assert fmt.label("ttft_p95_ms") == "TTFT p95"
    assert fmt.label("usd_per_1m_output_tokens") == "USD per 1M output tokens"
    assert fmt.label("decode_mbu") == "Decode MBU"
