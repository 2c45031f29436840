"""Kernel names shortened the way people say them: one function for the CLI, the findings, the
reports and the dashboard (the full name stays in the store, one flag or one hover away).

What a profiler shows as a kernel name is often a demangled C++ signature hundreds of characters
long (``void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, …>(…)``),
an Itanium-mangled symbol (``_ZN7ck_tile6kentryILi256E…``), or a generated library name whose
parameters are the point (``Cijk_Alik_Bljk_BBS_BH_…_MT256x32x64_MI16x16x1_…``). The rules:

1. C++ signatures lose their return type, parameter list, namespaces and template arguments:
   ``bn_bw_1C11_kernel_new``. A generic wrapper keeps what it wraps: PyTorch's elementwise / reduce
   templates their functor (``vectorized_elementwise_kernel<add>``), CUTLASS' ``Kernel<…>`` and
   ``kentry<…>`` the kernel inside, ``multi_tensor_apply_kernel<Adam>``.
2. Mangled symbols give the kernel's own identifier (``paged_attention_ll4mi_QKV_kernel``,
   ``FmhaFwdKernel``).
3. Tensile (rocBLAS / hipBLASLt) names keep the layout and type and the macro tile and matrix
   instruction that tell them apart: ``Cijk_Alik_Bljk_BBS…MT256x32x64_MI16x16x1``.
4. Whatever is still longer than the width loses its middle (``head…tail``), never its end: a
   name's suffix often carries the variant (``…_swiglu``, ``…_sm100f``).

:func:`short_kernel_names` shortens a listing: names whose short forms collide get back what
distinguishes them (template arguments, or the Tensile parameters that differ), so two rows of
one table never read the same.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: Width of a name in a table or a finding, characters.
DEFAULT_WIDTH = 60

#: Wrappers whose own name says nothing: the first template argument is the kernel.
_WRAPPERS = frozenset({"Kernel", "Kernel2", "kentry", "device_kernel", "kernel", "cutlass_kernel"})
#: PyTorch's generic elementwise / reduce templates: the functor is the op.
_TORCH_TEMPLATES = re.compile(r"^(?:vectorized_|unrolled_)?elementwise_kernel(?:_manual_unroll)?$|"
                              r"^reduce_kernel$|^index_elementwise_kernel$|^multi_tensor_apply_kernel$")
#: Where the op of a PyTorch template is named, most specific first.
FUNCTOR_PATTERNS = (
    r"CUDAFunctor(?:OnSelf|OnOther)?_(\w+)",
    r"(\w+?)_kernel(?:_cuda|_impl)?\b",
    r"(\w+?)(?:Functor|Ops)\b",
    r"(\w+?)_functor\b",
    r"(\w+)\(at::TensorIterator",
)
GENERIC_FUNCTORS = frozenset({
    "elementwise", "vectorized_elementwise", "unrolled_elementwise", "gpu", "gpu_kernel_impl", "reduce", "A",
    "AUnary", "BUnary", "Binary", "Unary", "func_wrapper_t", "index_elementwise", "elementwise_kernel_manual_unroll",
    "gpu_kernel_impl_nocast", "elementwise_kernel",
})
_MANGLED_WRAPPERS = frozenset({"ck_tile", "kentry", "aiter", "vllm", "sglang", "sgl_hip", "at", "native", "c10",
                               "std", "cutlass", "detail"})
_TENSILE_KEEP = re.compile(r"^(?:MT\d+x\d+x\d+|MI\d+x\d+x\d+(?:x\d+)?)$")


def ellipsize(text: str, width: int = DEFAULT_WIDTH) -> str:
    """``text`` cut in the middle to ``width`` characters (``head…tail``, the head a little
    longer); unchanged when it fits."""
    if width < 2 or len(text) <= width:
        return text
    head = (width - 1) * 3 // 5
    tail = width - 1 - head
    return text[:head] + "…" + (text[-tail:] if tail else "")


def short_kernel_name(name: str, width: int = DEFAULT_WIDTH) -> str:
    """The name a person would say for kernel ``name``, at most ``width`` characters (rules in the
    module docstring)."""
    return ellipsize(_short(name, detail=False), width)


def short_kernel_names(names: Sequence[str], width: int = DEFAULT_WIDTH) -> list[str]:
    """Short names for a listing, in order: like :func:`short_kernel_name`, except that names
    whose short forms collide get back the part that tells them apart (the template arguments, or
    the differing parameters of a generated name), and a listing never shows one short form for
    two different names while the width allows otherwise."""
    first = [_short(n, detail=False) for n in names]
    out = list(first)
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(first):
        groups.setdefault(s, []).append(i)
    for idx in groups.values():
        distinct = {names[i] for i in idx}
        if len(distinct) < 2:
            continue
        second = {i: _short(names[i], detail=True) for i in idx}
        if len({second[i] for i in idx}) == len(distinct):  # the template arguments tell them apart
            cut = {i: ellipsize(v, width) for i, v in second.items()}
            if len(set(cut.values())) == len(distinct):
                second = cut
        if len({second[i] for i in idx}) < len(distinct) or max(len(v) for v in second.values()) > width:
            # the parameters that differ, from the arguments when they differ, else from the name
            src = {names[i]: second[i] if len(set(second.values())) == len(distinct) else names[i] for i in idx}
            extra = _differing_tokens(list(dict.fromkeys(src.values())))
            second = {i: _with_extra(first[i], extra.get(src[names[i]], []), width) for i in idx}
        for i in idx:
            out[i] = second[i]
    result = [ellipsize(s, width) for s in out]
    # Still one form for several names (they differ only deep inside): number them, so the rows
    # at least read as different kernels; the full names are one flag away.
    by_form: dict[str, list[str]] = {}
    for n, r in zip(names, result):
        if n not in by_form.setdefault(r, []):
            by_form[r].append(n)
    for i, (n, r) in enumerate(zip(names, result)):
        if len(by_form[r]) > 1:
            tag = f" #{by_form[r].index(n) + 1}"
            result[i] = ellipsize(out[i], width - len(tag)) + tag
    return result


# ------------------------------------------------------------------------------------------------


def _short(name: str, detail: bool) -> str:
    s = name.strip()
    if not s:
        return s
    if s.startswith("_Z"):
        ident = mangled_identifier(s)
        if not detail or ident == s:
            return ident
        # the template's literal arguments (Li64E → 64, Lb1E → true), as a demangler writes them
        lits = [("true" if v == "1" else "false") if t == "b" else v
                for t, v in re.findall(r"L([a-z])(\d+)E", s[s.find(ident) + len(ident):])]
        return f"{ident}<{', '.join(lits)}>" if lits else ident
    if s.startswith("Cijk_"):
        return _tensile(s, detail)
    s = re.sub(r"^std::enable_if<.*?>::type\s+", "", s)
    s = re.sub(r"^(?:void|__global__ void)\s+", "", s).replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    head, rest = _split_head(s)
    if not rest or not re.fullmatch(r"[\w:~]+", head):  # not a C++ signature: a plain or generated name
        return s
    base = head.split("::")[-1] or head
    args = _template_args(rest)
    if base in _WRAPPERS and args:
        heads = [_split_head(a)[0].split("::")[-1] for a in args]
        inner = next((h for h in heads if re.search(r"_kernel$|Kernel$", h)), None) or next(
            (h for h in heads if re.match(r"[A-Za-z_]", h) and not re.fullmatch(r"gfx\w+_t", h)), None)
        return inner or base
    if _TORCH_TEMPLATES.match(base) and args:
        functor = torch_functor(rest)
        if functor:
            typed = re.search(r"Functor\w*<([^<>]*)>", rest) if detail else None
            return f"{base}<{functor}" + (f"<{_strip_ns(typed.group(1))}>" if typed else "") + ">"
    if detail and args:
        return f"{base}<{', '.join(_strip_ns(a) for a in args)}>"
    return base


def _split_head(s: str) -> tuple[str, str]:
    """(qualified name, the rest from its first top-level ``<`` or ``(``)."""
    m = re.search(r"[<(]", s)
    if not m:
        return s.strip(), ""
    # ``operator()`` and ``(anonymous)`` prefixes are gone; a leading "(" means a cast or nothing to split
    return s[: m.start()].strip(), s[m.start():]


def _template_args(rest: str) -> list[str]:
    """The top-level template arguments of ``<…>(…)``, as written."""
    if not rest.startswith("<"):
        return []
    depth, start, args = 0, 1, []
    for i, ch in enumerate(rest):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
            if depth == 0:
                args.append(rest[start:i].strip())
                break
        elif ch == "," and depth == 1:
            args.append(rest[start:i].strip())
            start = i + 1
    return [a for a in args if a]


def _strip_ns(arg: str) -> str:
    return re.sub(r"\b(?:[A-Za-z_]\w*::)+", "", arg)


def torch_functor(rest: str) -> str | None:
    for pat in FUNCTOR_PATTERNS:
        for m in re.finditer(pat, rest):
            if m.group(1) not in GENERIC_FUNCTORS:
                return str(m.group(1))
    return None


def mangled_identifier(s: str) -> str:
    """The kernel's identifier out of an Itanium-mangled symbol: the ``<length><identifier>``
    source names in order, the first ending in ``_kernel``/``Kernel`` else the first that is not a
    namespace wrapper."""
    ids: list[str] = []
    i = 0
    while i < len(s):
        m = re.match(r"\d+", s[i:])
        if not m:
            i += 1
            continue
        k, j = int(m.group()), i + m.end()
        if i >= 2 and s[i - 2] == "L" and s[i - 1].islower():  # a template literal (Li256E), not a name
            i = j
            continue
        ident = s[j:j + k]
        if len(ident) == k and re.fullmatch(r"[A-Za-z_]\w{2,}", ident):
            ids.append(ident)
            i = j + k
        else:
            i = j
    picked = next((x for x in ids if re.search(r"_kernel$|Kernel$", x)), None) or next(
        (x for x in ids if x not in _MANGLED_WRAPPERS), None)
    return picked or s


def _tensile(s: str, detail: bool) -> str:
    tokens = s.split("_")
    head = "_".join(tokens[:4])
    keep = [t for t in tokens[4:] if _TENSILE_KEEP.match(t)]
    return head + ("…" + "_".join(keep) if keep else "")


def _tokens(name: str) -> list[str]:
    return [t for t in re.split(r"[_<>(),\s:*&]+", name) if t]


def _differing_tokens(names: Sequence[str]) -> dict[str, list[str]]:
    """name → its tokens, in order and once each, that tell it apart: those at positions where the
    names differ when all have as many tokens, else those not every name has."""
    toks = {n: _tokens(n) for n in names}
    if len({len(t) for t in toks.values()}) == 1:  # one shape (template arguments): compare by position
        differ = [len({t[p] for t in toks.values()}) > 1 for p in range(len(next(iter(toks.values()))))]
        return {n: list(dict.fromkeys(x for x, d in zip(t, differ) if d)) for n, t in toks.items()}
    common = set.intersection(*(set(t) for t in toks.values()))
    return {n: list(dict.fromkeys(x for x in t if x not in common)) for n, t in toks.items()}


def _with_extra(short: str, extra: list[str], width: int) -> str:
    """``short`` followed by the ``extra`` tokens it lacks (``short…tok1_tok2``), as many as fit
    in ``width`` (at least one)."""
    missing = [t for t in extra if t not in short]
    if not missing:
        return short
    if short.startswith("Cijk_"):  # the matrix instruction is common to the group: make room
        short = re.sub(r"_MI\d+x\d+x\d+(?:x\d+)?$", "", short)
    text = short + "…" + missing[0]
    for t in missing[1:]:
        if len(text) + 1 + len(t) > width:
            break
        text += "_" + t
    return text
