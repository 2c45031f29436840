"""The load driver's agentic profile: multi-turn sessions whose turns re-send the conversation, think
time, sub-agent bursts, session and turn on every record, and the refusals of settings it cannot run.
Against the controllable streaming server of tests/load_server.py on 127.0.0.1 (it records every
request body)."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import pytest
from load_server import Behaviour, serve

from tracekit.collectors.load import LoadSpec, run_load
from tracekit.collectors.load.client import check_spec
from tracekit.errors import LoadInputError
from tracekit.request_rows import read_requests, write_requests


def _agentic_load(url: str, **kw: object) -> tuple[list, threading.Event]:
    """Run an agentic load until ``sessions`` sessions have started their last turn's answer."""
    spec = LoadSpec(url=url, duration_s=600, concurrency=kw.pop("concurrency", 2), profile="agentic",
                    prompt_tokens="fixed:20", max_tokens=4, **kw)  # type: ignore[arg-type]
    finish = threading.Event()
    records: list = []

    def progress(p: object) -> None:
        # enough requests for two whole sessions per client, then end the load (no timing involved)
        if p.requests_done >= spec.concurrency * (spec.turns + spec.subagents * (spec.turns // spec.subagent_every)) * 2:  # type: ignore[attr-defined,operator]
            finish.set()

    result = run_load(spec, on_progress=progress, finish=finish)
    records.extend(result.records)
    return records, finish


def test_each_turn_resends_the_conversation_with_the_previous_answer() -> None:
    with serve(Behaviour()) as (url, st):
        records, _ = _agentic_load(url, turns=3, turn_tokens="fixed:5")
        bodies = list(st.bodies)
    assert records and all(r.error is None for r in records)
    by_session: dict[int, list] = {}
    for r in records:
        assert r.session_id is not None and r.turn is not None
        by_session.setdefault(r.session_id, []).append(r)
    # the server saw, per session, prompts that extend one another: turn k+1 = turn k + its answer + 5 words
    prompts = [b["prompt"] for b in bodies]
    firsts = [p for p in prompts if len(p.split()) == 20]
    assert len(firsts) >= 2  # every session starts with a 20-word first message
    for first in firsts:
        chain = [first]
        while True:
            nxt = [p for p in prompts if p.startswith(chain[-1] + " ") and len(p.split()) == len(chain[-1].split()) + 4 + 5]
            if not nxt:
                break
            chain.append(nxt[0])
        # the answer (" w0 w1 w2 w3", 4 tokens) and 5 new words are appended each turn
        if len(chain) == 3:
            assert chain[1][len(first):].split()[:4] == ["w0", "w1", "w2", "w3"]
            break
    else:
        pytest.fail("no session's three turns extend one another")
    complete = [s for s in by_session.values() if len(s) == 3]
    assert complete, "no session ran all its turns"
    for s in complete:
        assert sorted(r.turn for r in s) == [0, 1, 2]
        turns = sorted(s, key=lambda r: r.turn)
        # the server's usage says prompt words + 1: each turn's prompt is 9 tokens longer than the last
        assert [b.prompt_tokens - a.prompt_tokens for a, b in itertools.pairwise(turns)] == [9, 9]


def test_subagent_bursts_branch_from_the_context_and_join_it() -> None:
    with serve(Behaviour(first_token_s=0.02)) as (url, st):
        records, _ = _agentic_load(url, concurrency=1, turns=2, turn_tokens="fixed:3", subagents=3,
                                   subagent_every=2)
        max_in_flight = st.max_in_flight
    turn0 = [r for r in records if r.session_id == 0 and r.turn == 0]
    turn1 = [r for r in records if r.session_id == 0 and r.turn == 1]
    # turn 1 of session 0: three sub-agent requests and the turn's own request
    assert len(turn0) == 1 and len(turn1) == 4
    subs = sorted(turn1, key=lambda r: r.request_id)[:3]
    main = max(turn1, key=lambda r: r.request_id)
    # the sub-agents ran at once (one client only, yet 3 requests in flight)
    assert max_in_flight == 3
    # each sub-agent starts fresh: only its 3-word task (the server's usage says words + 1)
    assert [r.prompt_tokens for r in subs] == [3 + 1] * 3
    # the turn's request: turn 0's prompt, its 4-token answer, the turn's 3 words and the three
    # sub-agents' answers (4 tokens each) as the turn's results
    assert main.prompt_tokens == turn0[0].prompt_tokens + 4 + 3 + 3 * 4
    assert main.start_ns >= max(r.start_ns + r.e2e_ns for r in subs) - 1_000_000  # after the burst (1 ms clock slack)


def test_chat_sessions_send_alternating_messages() -> None:
    with serve(Behaviour()) as (url, st):
        _agentic_load(url, concurrency=1, turns=2, endpoint="chat")
        bodies = list(st.bodies)
    second = next(b for b in bodies if len(b["messages"]) == 3)
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert second["messages"][1]["content"].split() == ["w0", "w1", "w2", "w3"]


def test_chat_sessions_alternate_with_subagents_and_share_the_system_prompt() -> None:
    with serve(Behaviour()) as (url, st):
        _agentic_load(url, concurrency=2, turns=2, endpoint="chat", system_tokens=30, subagents=2, subagent_every=2)
        bodies = list(st.bodies)
    systems = {b["messages"][0]["content"] for b in bodies}
    assert len(systems) == 1 and len(next(iter(systems)).split()) == 30  # one system prompt for every session
    assert all(b["messages"][0]["role"] == "system" for b in bodies)
    for b in bodies:
        roles = [m["role"] for m in b["messages"][1:]]
        assert roles[0] == "user" and roles[-1] == "user"
        assert all(a != c for a, c in itertools.pairwise(roles))  # user and assistant alternate
    # a sub-agent request: the system prompt and its own task only
    assert any(len(b["messages"]) == 2 and len(b["messages"][1]["content"].split()) == 64 for b in bodies)


def test_session_fields_and_cached_tokens_round_trip_the_request_log(tmp_path: Path) -> None:
    with serve(Behaviour()) as (url, _):
        records, _ = _agentic_load(url, concurrency=1, turns=2)
    write_requests(records, tmp_path / "r.jsonl")
    back = read_requests(tmp_path / "r.jsonl")
    assert [(r.session_id, r.turn, r.cached_tokens) for r in back] == [(r.session_id, r.turn, r.cached_tokens)
                                                                        for r in records]
    # a log written before schema 6 (no session fields) still reads, as independent prompts
    old = (tmp_path / "r.jsonl").read_text().replace(', "session_id": 0', "").splitlines()[0]
    old = old.split(', "turn"')[0] + "}"
    (tmp_path / "old.jsonl").write_text(old + "\n")
    (rec,) = read_requests(tmp_path / "old.jsonl")
    assert rec.session_id is None and rec.turn is None


@pytest.mark.parametrize(("kw", "why"), [
    ({"rate_rps": 2.0}, "closed-loop sessions"),
    ({"concurrency": None, "rate_rps": 1.0}, "closed-loop sessions"),
    ({"turns": 0}, "turns must be ≥ 1"),
    ({"think_s": -1.0}, "think time"),
    ({"subagents": -1}, "sub-agents"),
    ({"subagent_every": 0}, "sub-agents"),
    ({"turn_tokens": "zipf:3"}, "bad length distribution"),
])
def test_agentic_settings_it_cannot_run_are_refused_in_one_line(kw: dict, why: str) -> None:
    spec = LoadSpec(url="http://127.0.0.1:9", duration_s=1, concurrency=kw.pop("concurrency", 2),
                    profile="agentic", **kw)  # type: ignore[arg-type]
    with pytest.raises(LoadInputError, match=why) as exc:
        check_spec(spec)
    assert "\n" not in str(exc.value)
