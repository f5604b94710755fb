"""String formats llguidance does not know, or holds short of the calendar, written as their standards' patterns.

llguidance holds `email`, `uri`, `uuid` and a few more formats exactly, but of
any other it warns ("Unknown format: uri-reference") and takes any string.
Where the standard behind a format defines it as a regular language, the
pattern of that language holds it as exactly: URI references (RFC 3986), IRIs
and IRI references (RFC 3987), URI templates (RFC 6570), JSON pointers (RFC
6901) and relative JSON pointers. Dates and times, too, which llguidance holds
short of the calendar (RFC 3339 on it: see _DATE). The patterns are written
from the standards' grammars, one rule a name, and tested against the
validators `jsonschema` checks these formats with. A string with a `pattern` of
its own keeps its format as written (and llguidance's reading of it): one
pattern a schema.
"""

from __future__ import annotations

from typing import Any

from .schema_keywords import rewritten_bottom_up


def _alternatives(*rules: str) -> str:
    return "(?:" + "|".join(rules) + ")"


def _ranges(*pairs: tuple[int, int]) -> str:
    """Code point ranges as the inside of a character class (the characters themselves)."""
    return "".join(f"{chr(low)}-{chr(high)}" for low, high in pairs)


# RFC 3986, appendix A (the `\-` and `\[` escapes read alike in Python's and llguidance's regexes).
_HEXDIG = "[0-9A-Fa-f]"
_PCT_ENCODED = f"%{_HEXDIG}{_HEXDIG}"
_UNRESERVED = r"A-Za-z0-9\-._~"
_SUB_DELIMS = "!$&'()*+,;="
_DEC_OCTET = _alternatives("25[0-5]", "2[0-4][0-9]", "1[0-9][0-9]", "[1-9][0-9]", "[0-9]")
_IPV4 = rf"{_DEC_OCTET}(?:\.{_DEC_OCTET}){{3}}"
_H16 = f"{_HEXDIG}{{1,4}}"
_LS32 = _alternatives(f"{_H16}:{_H16}", _IPV4)


def _ipv6() -> str:
    """IPv6address: eight 16-bit pieces (the last two may be an IPv4 address), one run of zero pieces as `::`,
    with at most so many pieces before the `::` as leave room for those after it."""
    forms = [f"(?:{_H16}:){{6}}{_LS32}", f"::(?:{_H16}:){{5}}{_LS32}"]
    after = [f"(?:{_H16}:){{{count}}}{_LS32}" for count in (4, 3, 2, 1, 0)] + [_H16, ""]
    forms += [f"(?:(?:{_H16}:){{0,{most}}}{_H16})?::{tail}" for most, tail in enumerate(after)]
    return _alternatives(*forms)


def _uri_reference_rules(letters: str, private: str) -> dict[str, str]:
    """The rules of RFC 3986 (letters and private ""), or of RFC 3987 (letters: the `ucschar` IRIs add to
    `unreserved`; private: the `iprivate` characters a query may hold)."""
    unreserved = f"{_UNRESERVED}{letters}"
    pchar = f"(?:[{unreserved}{_SUB_DELIMS}:@]|{_PCT_ENCODED})"
    segment, segment_nz = f"{pchar}*", f"{pchar}+"
    segment_nz_nc = f"(?:[{unreserved}{_SUB_DELIMS}@]|{_PCT_ENCODED})+"
    ip_future = rf"v{_HEXDIG}+\.[{_UNRESERVED}{_SUB_DELIMS}:]+"
    ip_literal = rf"\[{_alternatives(_ipv6(), ip_future)}\]"
    reg_name = f"(?:[{unreserved}{_SUB_DELIMS}]|{_PCT_ENCODED})*"  # (an IPv4 address is a reg-name too)
    userinfo = f"(?:[{unreserved}{_SUB_DELIMS}:]|{_PCT_ENCODED})*"
    authority = f"(?:{userinfo}@)?{_alternatives(ip_literal, reg_name)}(?::[0-9]*)?"
    path_abempty = f"(?:/{segment})*"
    path_absolute = f"/(?:{segment_nz}(?:/{segment})*)?"
    path_noscheme = f"{segment_nz_nc}(?:/{segment})*"
    path_rootless = f"{segment_nz}(?:/{segment})*"
    query = f"(?:{pchar}|[/?{private}])*"
    fragment = f"(?:{pchar}|[/?])*"
    ending = rf"(?:\?{query})?(?:#{fragment})?"
    hier_part = _alternatives(f"//{authority}{path_abempty}", path_absolute, path_rootless, "")
    relative_part = _alternatives(f"//{authority}{path_abempty}", path_absolute, path_noscheme, "")
    absolute = f"[A-Za-z][A-Za-z0-9+\\-.]*:{hier_part}{ending}"
    return {"absolute": absolute, "reference": _alternatives(absolute, f"{relative_part}{ending}")}


# RFC 3987, section 2.2: its characters of the Basic Multilingual Plane (those beyond it, such as emoji, the
# validator `jsonschema` checks IRIs with does not take).
_UCSCHAR = _ranges((0xA0, 0xD7FF), (0xF900, 0xFDCF), (0xFDF0, 0xFFEF))
_IPRIVATE = _ranges((0xE000, 0xF8FF))
_URI = _uri_reference_rules("", "")
_IRI = _uri_reference_rules(_UCSCHAR, _IPRIVATE)

# RFC 6570, section 2 (level 4).
_VARCHAR = f"(?:[A-Za-z0-9_]|{_PCT_ENCODED})"
_VARSPEC = rf"{_VARCHAR}(?:\.?{_VARCHAR})*(?::[1-9][0-9]{{0,3}}|\*)?"
_EXPRESSION = rf"\{{[+#./;?&=,!@|]?{_VARSPEC}(?:,{_VARSPEC})*\}}"
_LITERAL = f"(?:[!#$&(-;=?-\\[\\]_a-z~{_UCSCHAR}{_IPRIVATE}]|{_PCT_ENCODED})"
# RFC 3339, section 5.6, on the calendar: February's 29th in leap years only, no year 0 and no leap second
# (llguidance's own `date` takes 2023-02-29, its `time` a 60th second at any minute; `jsonschema`'s validators
# refuse all three), and at most nine decimals of a second (a nanosecond: a small model can run a fraction on).
_YEAR = _alternatives("[0-9]{3}[1-9]", "[0-9]{2}[1-9]0", "[0-9][1-9]00", "[1-9]000")
_LEAP_YEAR = _alternatives("[0-9]{2}(?:0[48]|[2468][048]|[13579][26])", "(?:0[48]|[2468][048]|[13579][26])00")
_MONTH_DAY = _alternatives("(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])", "(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)",
                           "02-(?:0[1-9]|1[0-9]|2[0-8])")
_DATE = _alternatives(f"{_YEAR}-{_MONTH_DAY}", f"{_LEAP_YEAR}-02-29")
_HOUR, _MINUTE = "(?:[01][0-9]|2[0-3])", "[0-5][0-9]"
_TIME = rf"{_HOUR}:{_MINUTE}:{_MINUTE}(?:\.[0-9]{{1,9}})?(?:[Zz]|[+\-]{_HOUR}:{_MINUTE})"

# RFC 6901, section 3, and draft-handrews-relative-json-pointer-01, section 3.
_JSON_POINTER = "(?:/(?:[^~/]|~[01])*)*"

FORMAT_PATTERNS = {
    "date": f"^{_DATE}$",
    "time": f"^{_TIME}$",
    "date-time": f"^{_DATE}[Tt]{_TIME}$",
    "uri-reference": f"^{_URI['reference']}$",
    "iri": f"^{_IRI['absolute']}$",
    "iri-reference": f"^{_IRI['reference']}$",
    "uri-template": f"^(?:{_LITERAL}|{_EXPRESSION})*$",
    "json-pointer": f"^{_JSON_POINTER}$",
    "relative-json-pointer": f"^(?:0|[1-9][0-9]*)(?:#|{_JSON_POINTER})$",
}


def formats_as_patterns(schema: Any) -> Any:
    """`schema` with each string `format` of FORMAT_PATTERNS written as its pattern (a new schema; the input
    untouched), where the schema has no pattern of its own."""

    def change(node: dict[str, Any]) -> dict[str, Any]:
        name = node.get("format")
        if not isinstance(name, str) or name not in FORMAT_PATTERNS or "pattern" in node:
            return node
        return {("pattern" if key == "format" else key): (FORMAT_PATTERNS[name] if key == "format" else value)
                for key, value in node.items()}

    return rewritten_bottom_up(schema, change)
