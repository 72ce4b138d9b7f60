"""Conditions a question names (a year, an ordinal such as an edition, a quarter, a month), and chunks lacking them.

A chunk about the same thing under another condition (another year, edition, quarter or month) reads to a
cross-encoder almost exactly like the evidence, and answers another question. A chunk that states none of the forms of
a condition the question names is scored down by the calibrated `condition_factor` (1: no check; `fastcrag fit` and
the lab's `calibrate` choose it on labelled questions). On the question's side only unambiguous forms name a condition:
digits (a year such as 2019 or FY2019, an ordinal such as 45th, a quarter such as Q3 or "third quarter") and
capitalised month names, so that common words ("the first president", "may") never do. On the chunk's side every form
counts (45th or forty-fifth, Q3 or third quarter, 2019 inside 2019-20, Mar or 2020-03-15), so that a chunk is scored
down only when the condition is absent in every form. Numbers inside names (COVID-19, HAdV-55, 2019-nCoV), decades
(1990s) and centuries (16th century) are not conditions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_ORDINAL_WORDS = (
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth fourteenth "
    "fifteenth sixteenth seventeenth eighteenth nineteenth twentieth"
).split()
_ORDINALS = {w: i + 1 for i, w in enumerate(_ORDINAL_WORDS)}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_TENS_ORDINAL = {w[:-1] + "ieth": n for w, n in _TENS.items()}  # twentieth ... ninetieth

_MONTH_NAMES = "January February March April May June July August September October November December".split()
_MONTH_FORMS = {m.lower(): i + 1 for i, m in enumerate(_MONTH_NAMES)} | {
    m[:3].lower(): i + 1 for i, m in enumerate(_MONTH_NAMES)
}
_MONTH_FORMS["sept"] = 9
_MONTHS = "|".join(sorted(_MONTH_FORMS, key=len, reverse=True))
_DATE_DAY = re.compile(rf"\b(?:{_MONTHS})\.?\s+(\d{{1,2}})(?!\d)|(?<!\d)(\d{{1,2}})(?:\s+of)?\s+(?:{_MONTHS})\b")
_NAMED_MONTH = re.compile(r"\b(" + "|".join(_MONTH_NAMES) + r")\b")  # capitalised: "may" the verb is no month
_STATED_MONTH = re.compile(rf"\b({_MONTHS})\b")
_ISO_DATE = re.compile(r"(?<!\d)(?:1[0-9]|20)[0-9]{2}-(0[1-9]|1[0-2])-[0-3][0-9](?!\d)")
_NOT_NAME = r"(?<![\w/.-])"  # not glued to a name or a fraction on the left (COVID-19, HAdV-55, 1/2000)
_YEAR = re.compile(
    _NOT_NAME + r"(?:fy)?(1[0-9]{3}|20[0-9]{2})(?:\s*[-\u2013]\s*(1[0-9]{3}|20[0-9]{2}|[0-9]{2}))?(?![\w-]|'s)"
)
_DIGIT_ORDINAL = re.compile(_NOT_NAME + r"(\d{1,4})(?:st|nd|rd|th)(?![\w-])(?!\s+centur)")
_QUARTER = re.compile(r"\bq([1-4])\b|\b(first|second|third|fourth|1st|2nd|3rd|4th)[\s-]+(?:fiscal\s+)?quarter\b")


def _ordinal_value(word: str) -> int | None:
    if word[:-2].isdigit():
        return int(word[:-2])
    return _ORDINALS.get(word)


def named_conditions(question: str) -> list[frozenset[str]]:
    """The conditions `question` names, each as the set of forms that satisfy it (a year range: either end).

    Forms are normalised: `y2019` for a year, `o45` for an ordinal, `q3` for a quarter, `m3` for a month.
    """
    low = question.lower()
    found: list[frozenset[str]] = [
        frozenset({f"m{_MONTH_FORMS[m[1].lower()]}"})
        for m in _NAMED_MONTH.finditer(question.lstrip())
        if not (m.start() == 0 and m[1] == "May")  # "May I ..."
    ]
    quarters = list(_QUARTER.finditer(low))
    found += [frozenset({f"q{m.group(1) or _ordinal_value(m.group(2))}"}) for m in quarters]
    for m in _YEAR.finditer(low):
        first, second = m.group(1), m.group(2)
        years = {first}
        if second:
            years.add(second if len(second) == 4 else first[:2] + second)
        found.append(frozenset(f"y{y}" for y in years))
    for m in _DIGIT_ORDINAL.finditer(low):
        if not any(q.start() <= m.start() < q.end() for q in quarters):
            found.append(frozenset({f"o{int(m.group(1))}"}))
    return list(dict.fromkeys(found))


def stated_forms(text: str) -> set[str]:
    """Every year, ordinal, quarter and month `text` states, in any form, normalised as `named_conditions` does."""
    low = text.lower()
    forms = {f"y{y}" for y in re.findall(r"(?<!\d)(1[0-9]{3}|20[0-9]{2})(?!\d)", low)}
    for century, _, last in re.findall(r"(?<!\d)(1[0-9]|20)([0-9]{2})\s*[-\u2013/]\s*([0-9]{2})(?!\d)", low):
        forms.add(f"y{century}{last}")  # 2019-20: 2020 too
    forms |= {f"o{int(n)}" for n in re.findall(r"(?<!\d)(\d{1,4})(?:st|nd|rd|th)\b", low)}
    forms |= {f"o{int(a or b)}" for a, b in _DATE_DAY.findall(low)}  # May 12 states the 12th
    for m in re.finditer(r"\b(?:(twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)[\s-])?([a-z]+)\b", low):
        tens, word = m.group(1), m.group(2)
        if word in _ORDINALS:
            forms.add(f"o{(_TENS[tens] if tens else 0) + _ORDINALS[word]}")
        elif word in _TENS_ORDINAL and not tens:
            forms.add(f"o{_TENS_ORDINAL[word]}")
    forms |= {f"q{n}" for n in re.findall(r"\bq([1-4])\b", low) + re.findall(r"\b([1-4])q\b", low)}
    forms |= {f"q{o[1:]}" for o in forms if o.startswith("o") and o[1:] in {"1", "2", "3", "4"}}
    forms |= {f"m{_MONTH_FORMS[m]}" for m in _STATED_MONTH.findall(low)}
    forms |= {f"m{int(m)}" for m in _ISO_DATE.findall(low)}
    return forms


def _suffix(n: int) -> str:
    return "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def _shown(form: str) -> str:
    kind, value = form[0], form[1:]
    if kind == "o":
        return f"{value}{_suffix(int(value))}"
    if kind == "m":
        return _MONTH_NAMES[int(value) - 1]
    return f"Q{value}" if kind == "q" else value


def unmet_conditions(conditions: Sequence[frozenset[str]], text: str) -> list[str]:
    """The conditions `text` states in no form, as a reader would write them ("2019", "Q3", "45th", "March")."""
    if not conditions:
        return []
    forms = stated_forms(text)
    return [" or ".join(sorted(map(_shown, c))) for c in conditions if not c & forms]


def lacks_condition(conditions: Sequence[frozenset[str]], text: str) -> bool:
    """Whether `text` states none of the forms of at least one of `conditions`."""
    return bool(unmet_conditions(conditions, text))


def conditioned(question: str, texts: Sequence[str], scores: Sequence[float], factor: float) -> list[float]:
    """`scores` with those of texts lacking a condition `question` names multiplied by `factor` (1: unchanged)."""
    if factor >= 1.0:
        return list(scores)
    conditions = named_conditions(question)
    if not conditions:
        return list(scores)
    return [s * factor if lacks_condition(conditions, t) else s for s, t in zip(scores, texts, strict=True)]


def _shift_ordinal_word(m: re.Match[str]) -> str:
    word = m.group(0)
    n = _ORDINALS[word.lower()] % len(_ORDINAL_WORDS)  # twentieth wraps to first
    return _ORDINAL_WORDS[n] if word.islower() else _ORDINAL_WORDS[n].capitalize()


_CAPITAL_FORMS = sorted([*_MONTH_NAMES, *(m[:3] for m in _MONTH_NAMES), "Sept"], key=len, reverse=True)
_CAPITAL_MONTH = re.compile(r"\b(?:" + "|".join(_CAPITAL_FORMS) + r")\b")


def _next_month(form: str) -> str:
    n = _MONTH_FORMS[form.lower()] % 12
    return _MONTH_NAMES[n] if len(form) > 4 else _MONTH_NAMES[n][:3]


def change_conditions(text: str, conditions: Sequence[frozenset[str]]) -> str | None:
    """`text` stating another value of each condition it states (year, ordinal, quarter or month + 1), or None.

    A near miss made without labels: the question's evidence under another condition answers another question.
    None when `text` states none of `conditions`, or still states one after the change (a form left unchanged).
    """
    forms = stated_forms(text)
    if not any(c & forms for c in conditions):
        return None
    years = {f[1:] for c in conditions for f in c if f.startswith("y")}
    ordinals = {int(f[1:]) for c in conditions for f in c if f.startswith("o")}
    quarters = {int(f[1:]) for c in conditions for f in c if f.startswith("q")}
    months = {int(f[1:]) for c in conditions for f in c if f.startswith("m")}
    out = text
    if months:
        out = _CAPITAL_MONTH.sub(lambda m: _next_month(m[0]) if _MONTH_FORMS[m[0].lower()] in months else m[0], out)
    if years:
        year = r"(?<!\d)(1[0-9]{3}|20[0-9]{2})(?!\d)"
        out = re.sub(year, lambda m: str(int(m[1]) + 1) if m[1] in years else m[1], out)
    if ordinals or quarters:
        numbers = ordinals | quarters
        out = re.sub(
            r"(?<!\d)(\d{1,4})(st|nd|rd|th)\b",
            lambda m: f"{int(m[1]) + 1}{_suffix(int(m[1]) + 1)}" if int(m[1]) in numbers else m[0],
            out,
            flags=re.IGNORECASE,
        )
        words = [w for w, n in _ORDINALS.items() if n in numbers]
        if words:
            out = re.sub(rf"\b(?:{'|'.join(words)})\b", _shift_ordinal_word, out, flags=re.IGNORECASE)
        out = re.sub(
            r"\b([qQ])([1-4])\b|\b([1-4])([qQ])\b",
            lambda m: f"{m[1]}{int(m[2]) % 4 + 1}" if m[1] else f"{int(m[3]) % 4 + 1}{m[4]}",
            out,
        )
    changed = stated_forms(out)
    return None if out == text or any(c & changed for c in conditions) else out


def with_conditions_changed(question: str, texts: Sequence[str], evidence: Sequence[bool]) -> list[str] | None:
    """Candidates `texts` with every evidence chunk stating another value of the conditions `question` names.

    None when the question names none, no evidence is among the candidates, or an evidence chunk cannot be changed.
    """
    named = named_conditions(question)
    if not named or not any(evidence):
        return None
    changed = [change_conditions(t, named) if e else t for t, e in zip(texts, evidence, strict=True)]
    return None if any(t is None for t in changed) else [str(t) for t in changed]
