"""Answer normalisation: the text-level rules applied before any symbolic comparison.

`normalize_answer(text)` turns one answer (a gold answer or a model's) into one or more
`Normalized` forms: a cleaned LaTeX string for the symbolic checker plus what was taken off
it and must still be compared (a unit, a.m./p.m., multiple-choice letters, a text answer,
a time of day). Several forms come back when the answer states alternatives, e.g.
`\\frac23 \\approx 0.67` or `0.56 = 56\\%`; an answer matches when any form matches.

What is normalised, in order:
- math delimiters (`$...$`, `\\(...\\)`, `\\[...\\]`) and a whole-answer `\\boxed{}`;
- Python's and sympy's printed forms (`sqrt(3)/2`, `x**2`, `Interval.open(-oo, 3)`,
  `Matrix([[1], [2]])`; with `printed=True` also a list `[2, 3]`, the solutions, and a bare
  `I`) -> LaTeX, parsed and never evaluated (`runner.math.printed`);
- `\\mathrm{e}` and `\\mathrm{i}` -> `e` and `i` (Euler's number, the imaginary unit);
- `\\dfrac`/`\\tfrac` -> `\\frac`, `\\dbinom`/`\\tbinom` -> `\\binom`, `\\left`/`\\right`/`\\big`
  sizes, `\\displaystyle`; `\\mbox`, `\\textbf`, `\\mathrm`, ... -> `\\text`;
- thousands separators: `10,\\!000`, `2\\,598\\,960`, `23{,}000`, `1,000,000`, `12 345` (a
  group never starts with 0: `0,111` keeps its comma, a decimal comma the checker may read
  in a candidate); `2{,}5` is LaTeX's decimal comma, 2.5; numbers side by side that are
  not grouped digits are a list (`3 4` -> `3, 4`), never a sum or a product;
- spacing commands `\\! \\, \\; \\: \\ ~ \\quad`; a trailing `.`, `,` or `;`;
- `\\$` and `%` (recorded as the units "dollar" and "percent"), degrees (`^\\circ`, `°`,
  "degrees": the unit "degree", or converted to radians inside trig functions, where
  `\\sin 30^\\circ` means `\\sin(\\pi/6)`);
- trailing unit and noun words (`85\\text{ feet}`, `10 ways`, `9\\text{ a.m.}`,
  `440\\text{ cm}^2`): known units are recorded in a canonical name, nouns are dropped;
  words that hedge, negate or name another value (`\\text{ (or 6)}`, `\\text{ (approximately
  8)}`, `\\text{ is not the answer}`, `\\text{ (incorrect)}`) are recorded as the form's `hedge`;
- `x \\approx 11`: the variable's name is not an alternative;
- `\\text{ and }`/`\\text{ or }` between items -> `,`;
- `x = 5` -> `5` when the right side has no variables;
- `\\frac12` -> `\\frac{1}{2}`, `\\sqrt2` -> `\\sqrt{2}`, mixed numbers `2\\frac{1}{2}` -> `\\frac{5}{2}`,
  repeating decimals `0.\\overline{3}` -> `\\frac{1}{3}`, `8-1i` -> `8-1 i` (so `i` is read as
  the imaginary unit); a numeral with a base subscript (`0.0011_{2}`) is recorded as its
  digits and base (`runner.math.numerals`).

All patterns are linear-time and the input is capped (`MAX_ANSWER_CHARS`) by the caller,
because answers are hostile input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from fractions import Fraction

from ..agent.boxed import closing_brace
from .numerals import numeral
from .printed import looks_printed, printed_latex

__all__ = ["MAX_ANSWER_CHARS", "Normalized", "normalize_answer", "text_key", "unit_word"]

# Longer answers are compared as plain strings only: no competition answer is this long,
# and every rule below must stay cheap on hostile input.
MAX_ANSWER_CHARS = 4000


@dataclass(frozen=True, slots=True)
class Normalized:
    """One normalised form of an answer."""

    latex: str  # what the symbolic comparison sees
    key: str  # `latex` without insignificant spaces: identical keys are equal answers
    unit: str | None = None  # canonical unit name ("foot", "percent", "cm^2", ...)
    meridiem: str | None = None  # "am" / "pm"
    choices: frozenset[str] | None = None  # multiple-choice letters ("A", "C", "F")
    words: str | None = None  # a text answer, lower case, single spaces ("evelyn")
    clock: int | None = None  # a time of day h:mm[:ss] in seconds after 0:00
    variable: str | None = None  # `x` of an answer written `x = 5` (then `latex` is `5`)
    plain: str = ""  # the whole answer as words (`text_key`), for comparing with text answers
    numeral: tuple[str, int] | None = None  # `1011_2`: the digits and the base
    hedge: str | None = None  # words after the answer that name another value (`\text{ (or 6)}`)
    # `\text{(B) } 12`: a choice letter (in `choices`) with its value (the other fields).
    labelled: bool = False


# -- units ---------------------------------------------------------------------------------------

_UNIT_ALIASES: dict[str, tuple[str, ...]] = {
    "inch": ("inch", "inches", "in", "in."),
    "foot": ("foot", "feet", "ft", "ft."),
    "yard": ("yard", "yards", "yd", "yds"),
    "mile": ("mile", "miles", "mi"),
    "millimeter": ("mm", "millimeter", "millimeters", "millimetre", "millimetres"),
    "centimeter": ("cm", "centimeter", "centimeters", "centimetre", "centimetres"),
    "meter": ("m", "meter", "meters", "metre", "metres"),
    "kilometer": ("km", "kilometer", "kilometers", "kilometre", "kilometres"),
    "second": ("s", "sec", "secs", "second", "seconds"),
    "minute": ("min", "mins", "minute", "minutes"),
    "hour": ("h", "hr", "hrs", "hour", "hours"),
    "day": ("day", "days"),
    "week": ("week", "weeks"),
    "month": ("month", "months"),
    "year": ("yr", "yrs", "year", "years"),
    "dollar": ("dollar", "dollars", "usd", "$"),
    "cent": ("cent", "cents", "¢"),
    "euro": ("euro", "euros", "€"),
    "pound": ("pound", "pounds", "lb", "lbs"),
    "ounce": ("ounce", "ounces", "oz"),
    "gram": ("g", "gm", "gram", "grams"),
    "kilogram": ("kg", "kilogram", "kilograms"),
    "liter": ("l", "liter", "liters", "litre", "litres"),
    "milliliter": ("ml", "milliliter", "milliliters", "millilitre", "millilitres"),
    "gallon": ("gallon", "gallons", "gal"),
    "quart": ("quart", "quarts", "qt"),
    "pint": ("pint", "pints", "pt"),
    "cup": ("cup", "cups"),
    "acre": ("acre", "acres"),
    "degree": ("degree", "degrees", "deg", "°"),
    "radian": ("radian", "radians", "rad"),
    "percent": ("percent", "per cent", "%"),
    "mph": ("mph", "miles per hour", "mi/h"),
    "kph": ("kph", "km/h", "kilometers per hour", "kilometres per hour"),
    "fps": ("feet per second", "ft/s"),
    "mps": ("meters per second", "metres per second", "m/s"),
}
_UNITS = {alias: name for name, aliases in _UNIT_ALIASES.items() for alias in aliases}
# Words that are neither units nor nouns of the answer but sit next to them.
_GENERIC_UNITS = frozenset({"unit", "units"})
_POWER_WORDS = {"square": 2, "sq": 2, "sq.": 2, "cubic": 3, "cu": 3, "cu.": 3}
_MERIDIEM = {"am": "am", "a.m.": "am", "a.m": "am", "pm": "pm", "p.m.": "pm", "p.m": "pm"}

_NUMBER_WORDS = {word: str(value) for value, word in enumerate(
    ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
     "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
     "nineteen", "twenty"])}
_NUMBER_WORDS.update({"thirty": "30", "forty": "40", "fifty": "50", "sixty": "60",
                      "seventy": "70", "eighty": "80", "ninety": "90", "hundred": "100"})

# Words after an answer that are functions or constants, never units or nouns.
_MATH_WORDS = frozenset({"sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "lg",
                         "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "mod", "gcd",
                         "lcm", "max", "min", "det", "inf", "or", "and", "pi", "ex"})


def unit_word(word: str) -> str | None:
    """The canonical unit a single word names (`inches` -> `inch`), or None."""
    return _UNITS.get(word.lower())


def _unit_of(words: list[str], power: int | None) -> tuple[str | None, str | None]:
    """(canonical unit, meridiem) of the words taken off the end of an answer."""
    phrase = " ".join(word.lower() for word in words).strip(" ,;:!?")
    meridiem = None
    for spelled, value in _MERIDIEM.items():
        if phrase == spelled or phrase.endswith(" " + spelled):
            meridiem = value
            phrase = phrase[:len(phrase) - len(spelled)].strip()
            break
    phrase = phrase.rstrip(".") if phrase not in _UNITS else phrase
    tokens = phrase.split()
    unit_power = power
    if tokens and tokens[0] in _POWER_WORDS:
        unit_power = _POWER_WORDS[tokens[0]]
        tokens = tokens[1:]
    unit = None
    # The longest known unit phrase at the start wins ("miles per hour" over "miles").
    for size in range(min(len(tokens), 4), 0, -1):
        candidate = " ".join(tokens[:size])
        if candidate in _UNITS:
            unit = _UNITS[candidate]
            break
        if candidate.endswith("s") and candidate[:-1] in _UNITS and size == 1:
            unit = _UNITS[candidate[:-1]]
            break
    if unit is None and tokens and tokens[0] in _GENERIC_UNITS:
        return None, meridiem
    if unit is not None and unit_power and unit_power > 1:
        unit = f"{unit}^{unit_power}"
    return unit, meridiem


# -- string-level cleanup --------------------------------------------------------------------------

_DELIMITERS = (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"))
_WHOLE_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_FRAC_STYLE = re.compile(r"\\[dt]frac(?![A-Za-z])")
_BINOM_STYLE = re.compile(r"\\[dt]binom(?![A-Za-z])")
_INVISIBLE_DELIMITER = re.compile(r"\\(?:left|right)\s*\.")
_SIZING = re.compile(r"\\(?:left|right|[bB]igg?[lr]?|displaystyle|textstyle)(?![A-Za-z])")
_TEXT_COMMAND = re.compile(
    r"\\(?:textnormal|textrm|textbf|textit|textsf|texttt|textup|mbox|hbox|text|mathrm|mathbf"
    r"|mathit|mathsf)\s*\{")
# `23{,}000` groups thousands; `2{,}5` is LaTeX's decimal comma (braced so that no space
# follows it), read as a point.
_BRACED_COMMA = re.compile(r"(?<=\d)\s?\{\s?,\s?\}\s?(?=\d{3}(?!\d))")
_BRACED_DECIMAL_COMMA = re.compile(r"(?<=\d)\s?\{\s?,\s?\}\s?(?=\d)")
_BANG_THOUSANDS = re.compile(r"(?<=\d),\s*\\!\s*(?=\d{3}(?!\d))")
_THIN_THOUSANDS = re.compile(r"(?<=\d)\\,(?=\d{3}(?!\d))")
# `\\` (a row break in a matrix) is matched first so its second backslash is never read
# as the start of `\ ` (a space).
_SPACING = re.compile(r"(\\\\)|\\(?:[,;: ]|quad|qquad)(?![A-Za-z])|~")
_NEGATIVE_SPACE = re.compile(r"(\\\\)|\\!")
# A thousands group starts with 1 to 3 digits, never with 0: "0,111" is a decimal comma.
_COMMA_NUMBER = re.compile(r"-?[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?")
_BRACED_COMMA_NUMBER = re.compile(r"(?<=\{)[1-9]\d{0,2}(?:,\d{3})+(?=\})")
_DOLLAR = re.compile(r"\\\$|\$")
_PERCENT = re.compile(r"\s*\\?%")
_DEGREE = re.compile(r"\s*(?:\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|°|\\degree(?![A-Za-z]))")
_TRIG = re.compile(r"\\(?:sin|cos|tan|cot|sec|csc)(?![A-Za-z])")
_DEGREE_NUMBER = re.compile(
    r"(\d+(?:\.\d+)?)\s*(?:\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|°|\\degree(?![A-Za-z]))")
# `\mathrm{e}` and `\mathrm{i}`: Euler's number and the imaginary unit set upright.
_VARNOTHING = re.compile(r"\\varnothing(?![A-Za-z])")
# `1e20`, `3e8`, `2.5E-3`: scientific notation, not Euler's number times 20.
_SCIENTIFIC = re.compile(r"(-?\d+(?:\.\d+)?)[eE]([+-]?\d+)")
# Text answers that name a value.
_WORD_VALUES = {"infinity": "\\infty", "positive infinity": "\\infty", "negative infinity": "-\\infty",
                "all real numbers": "(-\\infty, \\infty)", "no solution": "\\emptyset",
                "no solutions": "\\emptyset", "empty set": "\\emptyset", "the empty set": "\\emptyset"}
_PLAIN_WORDS = re.compile(r"[A-Za-z ]+")
_UPRIGHT_CONSTANT = re.compile(r"\\(?:mathrm|mathit|operatorname|rm)\s*\{\s*([ei])\s*\}")
# Words after an answer that name another value or hedge it: `5 \text{ (or 6)}`.
# Words that negate it make it no answer: `5 \text{ is not the answer}`, `5 \text{ (incorrect)}`.
_HEDGE = re.compile(r"(?<![A-Za-z])(?:or|approx(?:imately)?|about|around|roughly|maybe|perhaps"
                    r"|possibly|nearly|almost|circa|estimated|not|no|isn't|never|neither|nor"
                    r"|either|incorrect|wrong|false|unsure|guess(?:ed)?)(?![A-Za-z])|≈|~",
                    re.IGNORECASE)
_TEXT_CONNECTIVE = re.compile(r"\\text\{\s*,?\s*(?:and|or)\s*\}")
_EMPTY_ITEMS = re.compile(r",\s*(?:,\s*)+")
_APPROX = re.compile(r"\\approx(?![A-Za-z])|≈")
_COMPACT_FRAC = re.compile(r"\\frac\s*(\d)\s*(\d)")
_COMPACT_FRAC_LEFT = re.compile(r"\\frac\s*(\d)\s*(?=\{)")
_COMPACT_FRAC_RIGHT = re.compile(r"\\frac\s*(\{[^{}]*\})\s*(\d)")
_COMPACT_SQRT = re.compile(r"\\sqrt\s*(\d)")
_MIXED = re.compile(r"(-?)(\d+)\s*\\frac\{(\d+)\}\{(\d+)\}")
_MIXED_PLAIN = re.compile(r"(-?)(\d+)\s+(\d+)\s*/\s*(\d+)")
_REPEATING = re.compile(r"(-?)(\d*)\.(\d*)\\overline\{(\d+)\}")
_IMAGINARY_AFTER_DIGIT = re.compile(r"(?<=\d)\s*i(?![A-Za-z])")
_LABEL = re.compile(r"[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?")
_ASSIGNMENT = re.compile(r"([A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?)\s*=\s*")
_COMMANDS = re.compile(r"\\[A-Za-z]+")
_TEXT_GROUP = re.compile(r"\\text\{([^{}]*)\}")
_CLOCK = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?")
_CHOICE = re.compile(r"\(([A-Za-z])\)|([A-Z])")
_CHOICE_SEPARATORS = re.compile(r"\s*(?:,|\band\b|\bor\b|\s)\s*")
_SPACE_RUN = re.compile(r"\s+")
_INSIGNIFICANT_SPACE = re.compile(r"(?<=[^A-Za-z])\s+|\s+(?=[^A-Za-z])")


def _strip_wrappers(text: str) -> str:
    """Outer math delimiters and a box around the whole answer, repeatedly."""
    while True:
        text = text.strip()
        before = text
        for opener, closer in _DELIMITERS:
            if len(text) >= len(opener) + len(closer) and text.startswith(opener) \
                    and text.endswith(closer):
                text = text[len(opener):len(text) - len(closer)]
                break
        box = _WHOLE_BOX.match(text)
        if box and closing_brace(text, box.end() - 1) == len(text) - 1:
            text = text[box.end():-1]
        if text == before:
            return text


def _flatten_text_commands(text: str) -> str:
    """Every text-like command becomes `\\text{...}` with brace-free content."""
    text = _TEXT_COMMAND.sub(r"\\text{", text)
    out: list[str] = []
    position = 0
    while True:
        start = text.find("\\text{", position)
        if start < 0:
            out.append(text[position:])
            return "".join(out)
        close = closing_brace(text, start + 5)
        if close < 0:
            out.append(text[position:])
            return "".join(out)
        inner = text[start + 6:close].replace("{", "").replace("}", "")
        out.append(text[position:start])
        out.append("\\text{" + _SPACE_RUN.sub(" ", inner) + "}")
        position = close + 1


def _thousands(text: str) -> str:
    """Separators that can only group digits: `{,}`, `,\\!` and `\\,` before three digits."""
    text = _BRACED_COMMA.sub("", text)
    text = _BRACED_DECIMAL_COMMA.sub(".", text)
    text = _BANG_THOUSANDS.sub("", text)
    return _THIN_THOUSANDS.sub("", text)


# Numbers side by side are never a sum: `12 345` groups thousands with spaces (SI style),
# `3 4` is two values.
_GROUPED_DIGITS = re.compile(r"-?[1-9]\d{0,2}(?: \d{3})+(?:\.\d+)?")
_SIDE_BY_SIDE = re.compile(r"-?\d+(?:\.\d+)?(?: -?\d+(?:\.\d+)?)+")


def _juxtaposed(text: str) -> str:
    """`12 345` -> `12345`; `3 4` -> `3, 4` (two values, never `7` or `12`)."""
    if _GROUPED_DIGITS.fullmatch(text):
        return text.replace(" ", "")
    if _SIDE_BY_SIDE.fullmatch(text):
        return ", ".join(text.split(" "))
    return text


def _comma_number(text: str) -> str:
    """"1,000,000" alone (or in braces) is a number; "1,2" or "1, 000" are lists and stay."""
    if _COMMA_NUMBER.fullmatch(text):
        return text.replace(",", "")
    return _BRACED_COMMA_NUMBER.sub(lambda match: match.group(0).replace(",", ""), text)


def _cleanup(text: str, *, printed: bool = False) -> str:
    text = _strip_wrappers(text)
    if printed or looks_printed(text):
        text = printed_latex(text) or text
    text = _UPRIGHT_CONSTANT.sub(r"\1", text)
    text = _VARNOTHING.sub(r"\\emptyset", text)
    text = _FRAC_STYLE.sub(r"\\frac", text)
    text = _BINOM_STYLE.sub(r"\\binom", text)
    text = _INVISIBLE_DELIMITER.sub("", text)
    text = _SIZING.sub("", text)
    text = _flatten_text_commands(text)
    text = _thousands(text)
    text = _NEGATIVE_SPACE.sub(lambda match: match.group(1) or "", text)
    text = _SPACING.sub(lambda match: match.group(1) or " ", text)
    return _SPACE_RUN.sub(" ", text).strip()


def _letters_outside_commands(text: str) -> bool:
    return bool(re.search(r"[A-Za-z]", _COMMANDS.sub("", _TEXT_GROUP.sub("", text))))


def _alternatives(text: str, *, candidate: bool) -> list[str]:
    """`a \\approx b` and purely numeric `a = b` chains state one answer several ways.

    A gold answer's pieces are all accepted. A candidate's pieces are all returned too, and
    the checker accepts them only when they agree (`6=5` and `x=6=5` are no answer, `2+2=4`
    is 4), as it does for `\\approx` alternatives. A chain that starts with a variable
    (`x=6=5`) keeps it on every piece (`x=6`, `x=5`)."""
    parts = [part.strip() for part in _APPROX.split(text)]
    if len(parts) > 1 and _LABEL.fullmatch(parts[0]):
        parts = parts[1:]  # `x \approx 11`: the variable's name, not an alternative
    expanded: list[str] = []
    for part in parts:
        pieces = [piece.strip() for piece in part.split("=")]
        label = ""
        # `x=6=5`, not `x_1 = a, x_2 = b` (a list of assignments)
        if len(pieces) > 2 and _LABEL.fullmatch(pieces[0]) and "," not in part:
            label, pieces = pieces[0] + " = ", pieces[1:]
        if len(pieces) > 1 and all(piece and not _letters_outside_commands(piece)
                                   for piece in pieces):
            expanded.extend(label + piece for piece in pieces)
        else:
            expanded.append(part)
    return [part for part in expanded if part] or [text]


# -- the tail: units, nouns, a.m./p.m. --------------------------------------------------------------

_TAIL_TOKEN = re.compile(
    r"\\text\{([^{}]*)\}(?:\s*\^\s*\{?\s*([23])\s*\}?)?"
    r"|([A-Za-z]+(?:\.[A-Za-z]+)*\.?)(?:\s*\^\s*\{?\s*([23])\s*\}?)?"
    r"|(\s+)")


def _split_tail(text: str) -> tuple[str, list[str], int | None]:
    """(core, words taken off the end, power such as the 2 of `\\text{cm}^2`).

    Scans tokens left to right once (linear) and remembers where the trailing run of
    text groups and plain words (two letters or more, not math words) begins."""
    tail_start: int | None = None
    tail_words: list[str] = []
    power: int | None = None
    position = 0
    length = len(text)
    while position < length:
        match = _TAIL_TOKEN.match(text, position)
        if match is None or match.end() == position:
            tail_start, tail_words, power = None, [], None
            position += 1
            continue
        text_group, text_power, word, word_power, space = match.groups()
        if space is not None:
            position = match.end()
            continue
        preceded_by_command = position > 0 and text[position - 1] == "\\"
        # A plain word starts a tail only after a space ("2 ab" maybe, "2ab" never).
        detached = position > 0 and (text[position - 1].isspace() or tail_start is not None)
        bare = word.lower().rstrip(".") if word is not None else ""
        # Two-letter words count only when known ("cm", "am"); "2 xy" keeps its product.
        known = word is not None and (word.lower() in _UNITS or word.lower() in _MERIDIEM
                                      or bare in _UNITS or bare in _POWER_WORDS)
        if word is not None and (preceded_by_command or len(bare) < 2
                                 or (len(bare) < 3 and not known)
                                 or bare in _MATH_WORDS
                                 or (tail_start is None and not detached)):
            tail_start, tail_words, power = None, [], None
            position = match.end()
            continue
        if tail_start is None:
            tail_start = position
        tail_words.append(text_group if text_group is not None else word)
        exponent = text_power or word_power
        if exponent:
            power = int(exponent)
        position = match.end()
    if tail_start is None:
        return text, [], None
    core = text[:tail_start].strip()
    if not core:
        return text, [], None  # the whole answer is text: not a tail
    return core, [word.strip() for word in tail_words if word.strip()], power


def _repeating(match: re.Match[str]) -> str:
    sign, whole, fixed, repeat = match.groups()
    value = Fraction(int(whole or "0"))
    if fixed:
        value += Fraction(int(fixed), 10 ** len(fixed))
    value += Fraction(int(repeat), (10 ** len(repeat) - 1) * 10 ** len(fixed))
    body = f"\\frac{{{value.numerator}}}{{{value.denominator}}}" if value.denominator != 1 \
        else str(value.numerator)
    return f"-{body}" if sign else body


def _mixed(match: re.Match[str]) -> str:
    sign, whole, numerator, denominator = match.groups()
    value = int(whole) * int(denominator) + int(numerator)
    return f"{sign}\\frac{{{value}}}{{{denominator}}}"


def _number_forms(text: str) -> str:
    text = _COMPACT_FRAC.sub(r"\\frac{\1}{\2}", text)
    text = _COMPACT_FRAC_LEFT.sub(r"\\frac{\1}", text)
    text = _COMPACT_FRAC_RIGHT.sub(r"\\frac\1{\2}", text)
    text = _COMPACT_SQRT.sub(r"\\sqrt{\1}", text)
    text = _REPEATING.sub(_repeating, text)
    mixed = _MIXED.fullmatch(text) or _MIXED_PLAIN.fullmatch(text)
    if mixed and int(mixed.group(3)) < int(mixed.group(4)):
        text = _mixed(mixed)
    return text


# -- one alternative -----------------------------------------------------------------------------


def text_key(text: str) -> str:
    """A text answer's comparable form: `\\text{}` unwrapped, lower case, single spaces,
    surrounding punctuation dropped."""
    unwrapped = _TEXT_GROUP.sub(r"\1", text)
    unwrapped = unwrapped.replace("\\", " ").replace("{", " ").replace("}", " ")
    return _SPACE_RUN.sub(" ", unwrapped).strip(" .,;:!?").lower()


def _choices(text: str) -> frozenset[str] | None:
    unwrapped = _TEXT_GROUP.sub(r"\1", text).strip().rstrip(".,;")
    items = [item for item in _CHOICE_SEPARATORS.split(unwrapped) if item]
    letters = []
    for item in items:
        match = _CHOICE.fullmatch(item)
        if match is None:
            return None
        letters.append((match.group(1) or match.group(2)).upper())
    return frozenset(letters) if letters else None


def _is_text_only(text: str) -> bool:
    """The answer is words: only `\\text{}` groups (with letters), spaces and punctuation."""
    if "\\text{" not in text:
        return False
    rest = _TEXT_GROUP.sub("", text)
    return not rest.strip(" .,;:!?()") and bool(re.search(r"[A-Za-z]", _TEXT_GROUP.sub(r"\1", text)))


def _unwrap_numeric_text(match: re.Match[str]) -> str:
    content = match.group(1)
    return match.group(0) if re.search(r"[A-Za-z]", content) else content


_NAMED_VALUE = re.compile(r"([A-Za-z])(?:_\{?(\d+)\}?)?\s*=\s*([^=,]+)")


def _ordered_assignments(core: str) -> str:
    """`y = 4, x = 3` -> `x = 3, y = 4`: values named by their variables are put in the
    variables' order, so that they read as the pair `(3, 4)`.

    The checker has no problem text to take the order from, so the order is the usual
    convention: by name (`x, y, z`; `a, b, c`), subscripts by number (`x_2` before
    `x_{10}`). Only lists of two or more assignments of numbers (no letters) to distinct
    variables are reordered; anything else stays as written."""
    items = [item.strip() for item in core.split(",")]
    if len(items) < 2:
        return core
    named: list[tuple[tuple[str, int], str]] = []
    for item in items:
        match = _NAMED_VALUE.fullmatch(item)
        if match is None or _letters_outside_commands(match.group(3)):
            return core
        letter, index, _ = match.groups()
        named.append(((letter, int(index) if index else -1), item))
    if len({name for name, _ in named}) != len(named):
        return core
    return ", ".join(item for _, item in sorted(named))


# `\text{(B) } 12`, `(B) 12`, `\textbf{(B)}~12`: a choice letter, then its value.
_LABELLED_CHOICE = re.compile(r"(?:\\text\{\s*\(([A-Z])\)\s*\}|\(([A-Z])\))\s*(\S.*)")
_WHOLE_TEXT = re.compile(r"\\text\{([^{}]*)\}")


def _labelled_choice(text: str) -> Normalized | None:
    """The form of a choice letter written with its value, or None: the letter in
    `choices`, the value's own form in the rest (`labelled`). The checker compares the
    letter with a gold letter and the value with a gold value (it has no list of options to
    tie the two together)."""
    text = text.strip()
    whole = _WHOLE_TEXT.fullmatch(text)  # `\text{(B) 12}`
    match = _LABELLED_CHOICE.fullmatch(whole.group(1).strip() if whole else text)
    if match is None:
        return None
    value = match.group(3).strip()
    if _choices(value) is not None:  # `(A) B`: two letters, not a letter and a value
        return None
    form = _one(value)
    return replace(form, choices=frozenset(match.group(1) or match.group(2)), labelled=True)


def _one(text: str) -> Normalized:
    labelled = _labelled_choice(text)
    if labelled is not None:
        return labelled
    unit: str | None = None
    text = _TEXT_GROUP.sub(_unwrap_numeric_text, text)
    if _DOLLAR.search(text):
        unit = "dollar"
        text = _DOLLAR.sub("", text).strip()
    if _PERCENT.search(text):
        unit = "percent"
        text = _PERCENT.sub("", text)
    if _TRIG.search(text):
        text = _DEGREE_NUMBER.sub(r"(\\frac{\1\\pi}{180})", text)
    elif _DEGREE.search(text):
        unit = "degree"
        text = _DEGREE.sub("", text)
    text = text.strip().rstrip(".,;").strip()

    words = text_key(text)
    if words in _WORD_VALUES and _PLAIN_WORDS.fullmatch(_TEXT_GROUP.sub(r"\1", text).strip(" .")):
        value = _WORD_VALUES[words]  # `\text{infinity}`, "No solution": words that name a value
        return Normalized(latex=value, key=_INSIGNIFICANT_SPACE.sub("", value), plain=words)
    choices = _choices(text)
    if choices is not None:
        key = ",".join(sorted(choices))
        return Normalized(latex=key, key=key, choices=choices)
    if _is_text_only(text):
        words = text_key(text)
        if words in _NUMBER_WORDS:
            number = _NUMBER_WORDS[words]
            return Normalized(latex=number, key=number, plain=words)

        clock_text = re.fullmatch(r"(\d{1,2}:\d{2}(?::\d{2})?)\s*(.*)", words)
        if clock_text is None:
            return Normalized(latex=text, key=words, words=words, plain=words)
        text = clock_text.group(1) + (f" {clock_text.group(2)}" if clock_text.group(2) else "")

    plain = text_key(text)
    core, tail, power = _split_tail(text)
    meridiem = None
    hedge = next((word for word in tail if _HEDGE.search(word)), None)
    if tail:
        tail_unit, meridiem = _unit_of(tail, power)
        unit = tail_unit or unit
    core = _TEXT_CONNECTIVE.sub(",", core)
    core = _EMPTY_ITEMS.sub(", ", core).strip().strip(",").strip().rstrip(".").strip()

    core = _ordered_assignments(_juxtaposed(_comma_number(core)))
    assignment = _ASSIGNMENT.match(core)
    variable = None
    if assignment and "=" not in core[assignment.end():] and \
            not _letters_outside_commands(core[assignment.end():]):
        variable = assignment.group(1).replace("{", "").replace("}", "")
        core = core[assignment.end():].strip()

    scientific = _SCIENTIFIC.fullmatch(core)
    if scientific:
        core = f"{scientific.group(1)} \\cdot 10^{{{int(scientific.group(2))}}}"
    core = _number_forms(core)
    core = _IMAGINARY_AFTER_DIGIT.sub(" i", core)
    core = _SPACE_RUN.sub(" ", core).strip()

    clock = None
    clock_match = _CLOCK.fullmatch(core)
    if clock_match:
        hours, minutes, seconds = (int(group or 0) for group in clock_match.groups())
        clock = hours * 3600 + minutes * 60 + seconds
    return Normalized(latex=core, key=_INSIGNIFICANT_SPACE.sub("", core), unit=unit,
                      meridiem=meridiem, clock=clock, variable=variable, plain=plain,
                      numeral=numeral(core), hedge=hedge)


def normalize_answer(text: str, *, candidate: bool = False,
                     printed: bool = False) -> list[Normalized]:
    """The normalised forms of one answer (see the module docstring); at least one.

    `candidate=True` for a model's answer: of a numeric `a = b` chain only the last piece
    counts (a gold answer's pieces are all accepted forms). `printed=True` when a program
    printed the answer (Program of Thoughts): it is read as Python's or sympy's output
    (`[2, 3]` the solutions, `I` the imaginary unit; `runner.math.printed`), which text
    that only Python writes (`sqrt(3)/2`, `x**2`) is anyway."""
    cleaned = _cleanup(text, printed=printed)
    return [_one(part) for part in _alternatives(cleaned, candidate=candidate)]
