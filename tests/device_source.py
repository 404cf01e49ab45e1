"""The small ``__device__`` functions of a .cu file as Python functions, transliterated statement by
statement from its text (declarations, if, counted for loops, ternaries, && and ||, casts, struct
initializers, 32-bit intrinsics), so that a CPU emulation of a kernel runs the file's own arithmetic
rather than a copy of it."""

import re
from collections import namedtuple
from types import SimpleNamespace

TYPES = r"^(?:const\s+)?(?:tf_u32|tf_u64|tf_i64|tf_u8|int|uint4|bool)\s*\*?\s+"
SIGNATURES = {
    "src_row": "S, E, w, j", "src_byte": "S, E, w, j", "shifted": "lo, hi, off", "word_of": "w, i",
    "out_word": "S, E, v, w", "batch_offset": "g, p", "staged_word": "sm, from_", "merged": "a, b, cut",
    "merged_words": "a, b, cut", "quotient": "n, magic, shift", "row_offset": "r, p",
    "word_first": "item, j, lane, m", "word_source": "base, rc, first, j, p", "row_col": "at, p", "advanced": "rc, p",
    "first_word": "at, lo, hi", "second_word": "at, lo, hi", "source_word": "s, a0, a1",
    "split_src": "S, E, b, w, j", "split_word": "S, E, v, b, w", "split_offsets": "g, p",
    "split_holds": "w, off, nbytes", "split_aligned": "prev, r, m", "split_ragged": "lane, m, valid, E",
    "split_byte": "held, pos",
}


def _balanced(text, i, open_, close):
    depth = 0
    for j in range(i, len(text)):
        depth += text[j] == open_
        depth -= text[j] == close
        if depth == 0:
            return j
    raise ValueError("unbalanced")


def _expr(e):
    e = re.sub(r"static_cast<[^>]+>", "", e)
    e = re.sub(r"reinterpret_cast<const tf_u32\*>", "as_u32", e)
    e = re.sub(r"\b(0x[0-9a-fA-F]+|\d+)u\b", r"\1", e)
    e = re.sub(r"\b(src_row|src_byte|split_word)<S, E>\(", r"\1(S, E, ", e)
    e = re.sub(r"\b([A-Z]\w*)\{([^{}]*)\}", r"\1(\2)", e)  # a struct's brace initializer
    e = re.sub(r"\bfrom\b", "from_", e)
    e = e.replace(" / ", " // ").replace("make_uint4", "U4").replace(" && ", " and ").replace(" || ", " or ")
    return _ternary(e.strip())


def _ternary(e):
    target = re.fullmatch(r"([\w.\[\]]+ [-+]?= )(.*)", e, re.S)  # an assignment's right-hand side
    if target:
        return target.group(1) + _ternary(target.group(2))
    m = re.fullmatch(r"(.*?) \? (.*?) : (.*)", e, re.S)
    return f"(({m.group(2)}) if ({m.group(1)}) else ({_ternary(m.group(3))}))" if m else e


def _statement(s, pad):
    s = " ".join(s.split())
    if s.startswith("return "):
        return [pad + "return " + _expr(s[7:])]
    typed = re.match(TYPES, s)
    if typed:
        rest, parts, depth, cur = s[typed.end():], [], 0, ""
        for ch in rest:
            depth += ch in "(["
            depth -= ch in ")]"
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
        return [pad + _expr(p.strip()) for p in parts]
    return [pad + _expr(s)]


def _block(text, pad):
    out, i = [], 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        m = re.match(r"(if|for)\s*\(", text[i:])
        if m:
            start = i + m.end() - 1
            end = _balanced(text, start, "(", ")")
            head = text[start + 1:end]
            j = end + 1
            while text[j].isspace():
                j += 1
            if text[j] == "{":
                k = _balanced(text, j, "{", "}")
                body, i = text[j + 1:k], k + 1
            else:
                k = text.index(";", j)
                body, i = text[j:k + 1], k + 1
            if m.group(1) == "if":
                out.append(f"{pad}if {_expr(head)}:")
            else:
                f = re.fullmatch(r"\s*int (\w+) = (.+); \1 < (.+); \+\+\1\s*", head)
                out.append(f"{pad}for {f.group(1)} in range({_expr(f.group(2))}, {_expr(f.group(3))}):")
            out += _block(body, pad + "    ")
            continue
        k = text.index(";", i)
        out += _statement(text[i:k], pad)
        i = k + 1
    return out


def device_functions(source: str, names) -> dict:
    """The named ``__device__`` functions of ``source`` (a .cu file's text) as Python functions in a dict,
    beside its ``constexpr int`` constants and its structs (as named tuples); SIGNATURES names the
    functions' parameters."""
    source = re.sub(r"//[^\n]*|#pragma[^\n]*", "", source)
    env = {"U4": U4, "as_u32": as_u32, "__funnelshift_r": funnelshift_r, "__byte_perm": byte_perm, "__umulhi": umulhi}
    env.update((k, int(v)) for k, v in re.findall(r"constexpr int (\w+) = (\d+);", source))
    for name, body in re.findall(r"struct (\w+) \{(.*?)\};", source, re.S):
        declared = re.findall(r"^\s*\w+ ([^;]*);", body, re.M)
        fields = [f.strip().split("[")[0] for decl in declared for f in decl.split(",")]
        env[name] = namedtuple(name, fields)
    for name in names:
        m = re.search(r"\b" + name + r"\([^)]*\)[^{;]*\{", source)
        end = _balanced(source, m.end() - 1, "{", "}")
        lines = [f"def {name}({SIGNATURES[name]}):"] + _block(source[m.end():end], "    ")
        exec("\n".join(lines), env)
    return env


def U4(x, y, z, w):
    return SimpleNamespace(x=x & 0xFFFFFFFF, y=y & 0xFFFFFFFF, z=z & 0xFFFFFFFF, w=w & 0xFFFFFFFF)


def funnelshift_r(lo, hi, sh):
    return (((hi & 0xFFFFFFFF) << 32 | (lo & 0xFFFFFFFF)) >> (sh & 31)) & 0xFFFFFFFF


def umulhi(a, b):
    return ((a & 0xFFFFFFFF) * (b & 0xFFFFFFFF)) >> 32


def byte_perm(x, y, s):
    pool = ((x & 0xFFFFFFFF) | (y & 0xFFFFFFFF) << 32).to_bytes(8, "little")
    return int.from_bytes(bytes(pool[(s >> (4 * i)) & 7] for i in range(4)), "little")


class Ptr:
    def __init__(self, buf, at):
        self.buf, self.at = buf, at

    def __add__(self, k):
        return Ptr(self.buf, self.at + k)


class _U32:
    def __init__(self, ptr):
        self.ptr = ptr

    def __getitem__(self, i):
        at = self.ptr.at + 4 * i
        assert 0 <= at and at + 4 <= len(self.ptr.buf), f"shared read at {at} of {len(self.ptr.buf)}"
        return int.from_bytes(bytes(self.ptr.buf[at:at + 4]), "little")


def as_u32(ptr):
    return _U32(ptr)
