"""Module templates of the multistep family (`inhabit.taskgen.families.multistep`): data, no logic.

A `ModuleTemplate` is one helper module of a generated package: its source with `$name`
placeholders (string.Template; Python code holds no `$`), the choices for each name, the calls
the tests make (argument tuples as Python literals; expected values are computed by running the
correct code), the bugs that may be planted (an `old` -> `new` text replacement, written in
template text), and one facade function that reaches the module through the package's `api`
module, the only function whose visible test fails when the bug is in this module.

`TRAIN` and `HELD_OUT` are disjoint domains with disjoint package names: a held-out package is
never a copy of a train one, only the same kind of problem.

The file is long because it is data: ten modules of source text, one template each, kept together
so that the disjointness of the two splits can be seen in one place.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModuleTemplate:
    domain: str
    modules: tuple[str, ...]
    """Choices for the module's file name."""
    names: dict[str, tuple[str, ...]]
    """Placeholder -> choices of its identifier (function names, a constant's name)."""
    source: str
    calls: tuple[tuple[str, str], ...]
    """(placeholder of a function, argument tuple literal): one visible test each."""
    hidden_calls: tuple[tuple[str, str], ...]
    bugs: tuple[tuple[str, str, str], ...]
    """(placeholder of the function it sits in, old text, new text), in template text."""
    facade: str
    """A function of the `api` module; `$M` is this module's name, `$F` the facade's name."""
    facade_names: tuple[str, ...]
    facade_calls: tuple[str, ...]
    """Argument tuples of the facade's visible tests (the first one's test is the failing one)."""


STATS = ModuleTemplate(
    domain="stats",
    modules=("stats", "numbers", "measures", "aggregate"),
    names={
        "mean": ("mean", "average", "avg"),
        "median": ("median", "middle_value"),
        "spread": ("spread", "value_range", "span"),
        "pct": ("percent_of", "share", "ratio_pct"),
        "clip": ("clip", "clamp", "bound"),
    },
    source='''"""Descriptive statistics over lists of numbers."""


def $mean(values):
    """Arithmetic mean; 0.0 for an empty list."""
    if not values:
        return 0.0
    return sum(values) / len(values)


def $median(values):
    """Middle value of the sorted list (mean of the two middle ones for an even length)."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2 == 1:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2


def $spread(values):
    """Largest minus smallest value."""
    return max(values) - min(values)


def $pct(part, whole):
    """`part` as a percentage of `whole`, rounded to one decimal."""
    return round(100 * part / whole, 1)


def $clip(value, low, high):
    """`value` limited to [low, high]."""
    return max(low, min(value, high))
''',
    calls=(
        ("mean", "([2, 4, 9],)"),
        ("median", "([5, 1, 3],)"),
        ("spread", "([4, 11, 7],)"),
        ("pct", "(3, 12)"),
        ("clip", "(15, 0, 10)"),
    ),
    hidden_calls=(
        ("mean", "([1, 2, 3, 10],)"),
        ("median", "([8, 2, 6, 4],)"),
        ("spread", "([3, -2],)"),
        ("pct", "(1, 8)"),
        ("clip", "(-4, 0, 10)"),
    ),
    bugs=(
        ("mean", "sum(values) / len(values)", "sum(values) / (len(values) + 1)"),
        ("median", "(ordered[mid - 1] + ordered[mid]) / 2", "(ordered[mid] + ordered[mid]) / 2"),
        ("spread", "max(values) - min(values)", "max(values) - max(values[:1])"),
        ("pct", "round(100 * part / whole, 1)", "round(100 * whole / part, 1)"),
        ("clip", "max(low, min(value, high))", "min(low, max(value, high))"),
    ),
    facade='''def $F(values):
    """One line describing `values`: mean, median and range."""
    return f"mean={$M.$mean(values):.2f} median={$M.$median(values)} range={$M.$spread(values)}"
''',
    facade_names=("describe", "summary_line", "stats_line"),
    facade_calls=("([3, 8, 1, 6],)", "([10, 20, 30],)"),
)

TEXT = ModuleTemplate(
    domain="text",
    modules=("text", "strings", "wording", "textutil"),
    names={
        "slug": ("slugify", "make_slug", "to_slug"),
        "words": ("word_count", "count_words"),
        "trunc": ("truncate", "shorten", "cut"),
        "title": ("title_case", "headline"),
        "initials": ("initials", "acronym"),
    },
    source='''"""Small text helpers: slugs, counts, truncation."""


def $slug(text):
    """Lower-case words joined by '-', punctuation dropped."""
    kept = "".join(c if c.isalnum() or c == " " else " " for c in text.lower())
    return "-".join(kept.split())


def $words(text):
    """Number of whitespace-separated words."""
    return len(text.split())


def $trunc(text, width):
    """`text` cut to at most `width` characters, ending in '...' when cut."""
    if len(text) <= width:
        return text
    return text[: width - 3] + "..."


def $title(text):
    """Every word capitalized, except short joining words after the first."""
    small = {"a", "an", "and", "of", "the", "to"}
    out = []
    for i, word in enumerate(text.split()):
        out.append(word if i > 0 and word in small else word.capitalize())
    return " ".join(out)


def $initials(text):
    """First letter of each word, upper-case."""
    return "".join(word[0].upper() for word in text.split())
''',
    calls=(
        ("slug", "('Hello, World again',)"),
        ("words", "('one two  three',)"),
        ("trunc", "('abcdefghijkl', 8)"),
        ("title", "('the art of war',)"),
        ("initials", "('portable network graphics',)"),
    ),
    hidden_calls=(
        ("slug", "('A-B c',)"),
        ("words", "('',)"),
        ("trunc", "('short', 10)"),
        ("title", "('war and peace',)"),
        ("initials", "('as soon as possible',)"),
    ),
    bugs=(
        ("slug", '"-".join(kept.split())', '"-".join(kept.split()[1:])'),
        ("trunc", "text[: width - 3]", "text[: width - 2]"),
        ("title", "i > 0 and word in small", "i > 1 and word in small"),
        ("trunc", "if len(text) <= width:", "if len(text) < width:"),
        ("initials", "word[0].upper()", "word[-1].upper()"),
    ),
    facade='''def $F(title, width):
    """A heading: title-cased, cut to `width`, with its slug in brackets."""
    return f"{$M.$trunc($M.$title(title), width)} [{$M.$slug(title)}]"
''',
    facade_names=("heading", "caption", "label_for"),
    facade_calls=("('the lord of the rings', 16)", "('a tale', 20)"),
)

INVENTORY = ModuleTemplate(
    domain="inventory",
    modules=("inventory", "stock", "warehouse", "items"),
    names={
        "total": ("total_units", "units_in_stock", "count_units"),
        "value": ("stock_value", "inventory_value"),
        "low": ("low_stock", "needs_reorder"),
        "restock": ("restock", "refill"),
        "LIMIT": ("REORDER_LEVEL", "MIN_UNITS", "LOW_WATER"),
    },
    source='''"""Stock records: dicts of item name -> (units, unit price)."""

$LIMIT = 5


def $total(stock):
    """Units over all items."""
    return sum(units for units, _ in stock.values())


def $value(stock):
    """Units times price over all items, rounded to cents."""
    return round(sum(units * price for units, price in stock.values()), 2)


def $low(stock):
    """Sorted names of the items with fewer than $LIMIT units."""
    return sorted(name for name, (units, _) in stock.items() if units < $LIMIT)


def $restock(stock, name, units):
    """A copy of `stock` with `units` more of `name` (a new item costs 0.0)."""
    out = dict(stock)
    have, price = out.get(name, (0, 0.0))
    out[name] = (have + units, price)
    return out
''',
    calls=(
        ("total", "({'nut': (3, 0.1), 'bolt': (10, 0.25)},)"),
        ("value", "({'nut': (3, 0.1), 'bolt': (10, 0.25)},)"),
        ("low", "({'nut': (3, 0.1), 'bolt': (10, 0.25), 'gear': (5, 2.0)},)"),
        ("restock", "({'nut': (3, 0.1)}, 'nut', 4)"),
    ),
    hidden_calls=(
        ("total", "({},)"),
        ("value", "({'cog': (2, 1.5)},)"),
        ("low", "({'a': (4, 1.0), 'b': (6, 1.0)},)"),
        ("restock", "({}, 'pin', 2)"),
    ),
    bugs=(
        ("low", "$LIMIT = 5", "$LIMIT = 4"),
        ("low", "if units < $LIMIT", "if units <= $LIMIT"),
        ("value", "units * price for", "units + price for"),
        ("restock", "(have + units, price)", "(units, price)"),
        ("total", "sum(units for units, _ in", "sum(1 for units, _ in"),
    ),
    facade='''def $F(records):
    """A stock report line: units, value and what to reorder."""
    low = ", ".join($M.$low(records)) or "nothing"
    return f"{$M.$total(records)} units worth {$M.$value(records)}; reorder: {low}"
''',
    facade_names=("stock_report", "inventory_line", "reorder_summary"),
    facade_calls=("({'nut': (3, 0.1), 'bolt': (10, 0.25), 'gear': (5, 2.0)},)", "({'cap': (9, 1.0)},)"),
)

DATES = ModuleTemplate(
    domain="dates",
    modules=("dates", "calendar_util", "days", "timeline"),
    names={
        "leap": ("is_leap", "leap_year"),
        "dim": ("days_in_month", "month_length"),
        "doy": ("day_of_year", "ordinal_day"),
        "parse": ("parse_date", "read_date", "split_date"),
    },
    source='''"""Calendar arithmetic on ISO dates (YYYY-MM-DD strings), without datetime."""

MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def $leap(year):
    """Gregorian leap year."""
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def $dim(year, month):
    """Days in `month` (1-12) of `year`."""
    if month == 2 and $leap(year):
        return 29
    return MONTH_DAYS[month - 1]


def $parse(text):
    """(year, month, day) of an ISO date string."""
    year, month, day = text.strip().split("-")
    return int(year), int(month), int(day)


def $doy(text):
    """1 for January 1st, 365 or 366 for December 31st."""
    year, month, day = $parse(text)
    return sum($dim(year, m) for m in range(1, month)) + day
''',
    calls=(
        ("leap", "(2024,)"),
        ("dim", "(2023, 4)"),
        ("parse", "('2021-07-09',)"),
        ("doy", "('2023-02-10',)"),
    ),
    hidden_calls=(
        ("leap", "(1900,)"),
        ("dim", "(2000, 2)"),
        ("parse", "(' 1999-12-31 ',)"),
        ("doy", "('2024-12-31',)"),
    ),
    bugs=(
        ("leap", "year % 400 == 0", "year % 40 == 0"),
        ("dim", "MONTH_DAYS[month - 1]", "MONTH_DAYS[month % 12]"),
        ("doy", "for m in range(1, month)", "for m in range(1, month + 1)"),
        ("dim", "if month == 2 and", "if month == 3 and"),
        ("parse", "return int(year), int(month), int(day)", "return int(year), int(day), int(month)"),
    ),
    facade='''def $F(date):
    """'YYYY day N of D' for an ISO date."""
    year = $M.$parse(date)[0]
    total = 366 if $M.$leap(year) else 365
    return f"{year} day {$M.$doy(date)} of {total}"
''',
    facade_names=("day_label", "date_position", "progress_of_year"),
    facade_calls=("('2024-03-01',)", "('2023-01-05',)"),
)

PARSING = ModuleTemplate(
    domain="parsing",
    modules=("parsing", "config_parse", "kv", "settings"),
    names={
        "pairs": ("parse_pairs", "read_pairs", "key_values"),
        "num": ("to_number", "as_number"),
        "flag": ("parse_flag", "to_bool", "truthy"),
        "lst": ("split_list", "parse_list"),
        "SEP": ("SEPARATOR", "DELIM"),
    },
    source='''"""Parse `key=value` settings text: one pair a line, '#' starts a comment."""

$SEP = "="


def $pairs(text):
    """Dict of the lines' keys to raw string values (blank and comment lines skipped)."""
    out = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        key, _, value = line.partition($SEP)
        out[key.strip()] = value.strip()
    return out


def $num(value):
    """int when the text is an integer, else float."""
    try:
        return int(value)
    except ValueError:
        return float(value)


def $flag(value):
    """True for yes/true/on/1 (any case), False otherwise."""
    return value.strip().lower() in ("yes", "true", "on", "1")


def $lst(value):
    """Comma-separated items, stripped, empty ones dropped."""
    return [item.strip() for item in value.split(",") if item.strip()]
''',
    calls=(
        ("pairs", "('a = 1\\n# note\\nb=two',)"),
        ("num", "('42',)"),
        ("flag", "('Yes',)"),
        ("lst", "('x, y,,z',)"),
    ),
    hidden_calls=(
        ("pairs", "('k=v # c\\n\\n',)"),
        ("num", "('2.5',)"),
        ("flag", "('off',)"),
        ("lst", "(' ,a',)"),
    ),
    bugs=(
        ("pairs", 'line.split("#", 1)[0]', 'line.split("#", 1)[-1]'),
        ("pairs", "out[key.strip()] = value.strip()", "out[value.strip()] = key.strip()"),
        ("flag", '("yes", "true", "on", "1")', '("yes", "true", "1")'),
        ("lst", "if item.strip()]", "if item]"),
        ("num", "return int(value)", "return int(value) - 1"),
    ),
    facade='''def $F(source):
    """(workers, debug, hosts) from a settings text."""
    raw = $M.$pairs(source)
    return ($M.$num(raw["workers"]), $M.$flag(raw["debug"]), $M.$lst(raw["hosts"]))
''',
    facade_names=("load_settings", "read_config", "settings_from_text"),
    facade_calls=(
        "('workers = 4\\ndebug=on  # dev\\nhosts = a, b,, c',)",
        "('workers=1\\ndebug=no\\nhosts=x',)",
    ),
)

MONEY = ModuleTemplate(
    domain="money",
    modules=("money", "billing", "pricing", "ledger"),
    names={
        "tax": ("with_tax", "add_tax", "gross"),
        "disc": ("discount", "apply_discount"),
        "split": ("split_bill", "share_cost"),
        "cents": ("to_cents", "in_cents"),
        "RATE": ("TAX_RATE", "VAT"),
    },
    source='''"""Prices in currency units (floats); results rounded to cents."""

$RATE = 0.2


def $tax(net):
    """`net` plus tax at $RATE."""
    return round(net * (1 + $RATE), 2)


def $disc(price, percent):
    """`price` reduced by `percent` percent."""
    return round(price * (100 - percent) / 100, 2)


def $split(total, people):
    """Equal shares of `total`; the first share takes the rounding remainder."""
    share = round(total / people, 2)
    first = round(total - share * (people - 1), 2)
    return [first] + [share] * (people - 1)


def $cents(amount):
    """Whole cents of `amount`."""
    return int(round(amount * 100))
''',
    calls=(("tax", "(50.0,)"), ("disc", "(80.0, 25)"), ("split", "(10.0, 3)"), ("cents", "(12.345,)")),
    hidden_calls=(("tax", "(1.0,)"), ("disc", "(19.99, 10)"), ("split", "(7.0, 2)"), ("cents", "(0.5,)")),
    bugs=(
        ("tax", "$RATE = 0.2", "$RATE = 0.02"),
        ("disc", "(100 - percent) / 100", "(100 + percent) / 100"),
        ("split", "share * (people - 1)", "share * people"),
        ("cents", "amount * 100", "amount * 10"),
        ("split", "[share] * (people - 1)", "[share] * people"),
    ),
    facade='''def $F(net, percent, people):
    """What each person pays for `net` after a discount and tax."""
    total = $M.$tax($M.$disc(net, percent))
    return $M.$split(total, people)
''',
    facade_names=("per_person", "bill_shares", "checkout_split"),
    facade_calls=("(100.0, 10, 3)", "(20.0, 0, 2)"),
)

# Held-out domains: other code, other names, same kinds of bugs.
GEOMETRY = ModuleTemplate(
    domain="geometry",
    modules=("geometry", "shapes", "planar"),
    names={
        "area": ("rect_area", "area_of"),
        "perim": ("perimeter", "boundary_length"),
        "dist": ("manhattan", "grid_distance"),
        "bbox": ("bounding_box", "extent"),
    },
    source='''"""Plane geometry on integer points (x, y) and axis-aligned rectangles (x0, y0, x1, y1)."""


def $area(rect):
    """Area of a rectangle; 0 when it is inverted."""
    x0, y0, x1, y1 = rect
    return max(0, x1 - x0) * max(0, y1 - y0)


def $perim(rect):
    """Perimeter of a rectangle."""
    x0, y0, x1, y1 = rect
    return 2 * ((x1 - x0) + (y1 - y0))


def $dist(a, b):
    """Manhattan distance between two points."""
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def $bbox(points):
    """The smallest rectangle holding every point."""
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    return (min(xs), min(ys), max(xs), max(ys))
''',
    calls=(
        ("area", "((0, 0, 3, 4),)"),
        ("perim", "((1, 1, 4, 3),)"),
        ("dist", "((1, 2), (4, -2))"),
        ("bbox", "([(1, 5), (3, 2), (-1, 4)],)"),
    ),
    hidden_calls=(
        ("area", "((2, 2, 1, 5),)"),
        ("perim", "((0, 0, 1, 1),)"),
        ("dist", "((0, 0), (-3, 3))"),
        ("bbox", "([(0, 0), (2, 7)],)"),
    ),
    bugs=(
        ("area", "max(0, y1 - y0)", "max(0, y1 - x0)"),
        ("perim", "2 * ((x1 - x0) + (y1 - y0))", "2 * (x1 - x0) + (y1 - y0)"),
        ("dist", "abs(a[1] - b[1])", "abs(a[1] + b[1])"),
        ("bbox", "(min(xs), min(ys), max(xs), max(ys))", "(min(xs), min(ys), max(ys), max(xs))"),
    ),
    facade='''def $F(points):
    """Area and perimeter of the points' bounding box, and the distance across it."""
    box = $M.$bbox(points)
    return ($M.$area(box), $M.$perim(box), $M.$dist(box[:2], box[2:]))
''',
    facade_names=("box_metrics", "footprint"),
    facade_calls=("([(0, 0), (4, 1), (2, 6)],)", "([(1, 1), (2, 2)],)"),
)

GRADES = ModuleTemplate(
    domain="grades",
    modules=("grades", "marks", "scoring"),
    names={
        "letter": ("letter_grade", "to_letter"),
        "weighted": ("weighted_score", "combined"),
        "passed": ("passing", "who_passed"),
        "PASS": ("PASS_MARK", "THRESHOLD"),
    },
    source='''"""Course marks: scores 0-100, letters A-F, weighted components."""

$PASS = 50


def $letter(score):
    """A from 90, B from 80, C from 70, D from 60, else F."""
    for bound, letter in ((90, "A"), (80, "B"), (70, "C"), (60, "D")):
        if score >= bound:
            return letter
    return "F"


def $weighted(parts):
    """Weighted mean of (score, weight) pairs, rounded to one decimal."""
    total = sum(weight for _, weight in parts)
    return round(sum(score * weight for score, weight in parts) / total, 1)


def $passed(scores):
    """Sorted names whose score reaches $PASS."""
    return sorted(name for name, score in scores.items() if score >= $PASS)
''',
    calls=(
        ("letter", "(84,)"),
        ("weighted", "([(80, 1), (60, 3)],)"),
        ("passed", "({'ann': 72, 'bo': 41},)"),
    ),
    hidden_calls=(
        ("letter", "(60,)"),
        ("weighted", "([(90, 2), (70, 2)],)"),
        ("passed", "({'cy': 50, 'di': 49},)"),
    ),
    bugs=(
        ("letter", "if score >= bound:", "if score > bound:"),
        ("weighted", "score * weight for", "score + weight for"),
        ("passed", "$PASS = 50", "$PASS = 60"),
        ("letter", '(80, "B"), (70, "C")', '(80, "C"), (70, "B")'),
    ),
    facade='''def $F(name, parts):
    """'name: score (letter)' for weighted course parts."""
    score = $M.$weighted(parts)
    return f"{name}: {score} ({$M.$letter(score)})"
''',
    facade_names=("report_card", "grade_line"),
    facade_calls=("('ann', [(90, 1), (70, 1)])", "('bo', [(55, 2), (65, 1)])"),
)

SCHEDULE = ModuleTemplate(
    domain="schedule",
    modules=("schedule", "slots", "agenda"),
    names={
        "mins": ("to_minutes", "minutes_of"),
        "fmt": ("format_time", "clock"),
        "overlap": ("overlaps", "clashes"),
        "free": ("free_minutes", "gap_total"),
    },
    source='''"""Meeting slots as ('HH:MM', 'HH:MM') pairs within one day."""


def $mins(text):
    """Minutes since midnight of 'HH:MM'."""
    hours, minutes = text.split(":")
    return int(hours) * 60 + int(minutes)


def $fmt(minutes):
    """'HH:MM' of minutes since midnight."""
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def $overlap(a, b):
    """Whether two slots share a minute (touching ends do not)."""
    return $mins(a[0]) < $mins(b[1]) and $mins(b[0]) < $mins(a[1])


def $free(slots, start, end):
    """Minutes between `start` and `end` not covered by the sorted, disjoint `slots`."""
    busy = sum($mins(b) - $mins(a) for a, b in slots)
    return $mins(end) - $mins(start) - busy
''',
    calls=(
        ("mins", "('09:30',)"),
        ("fmt", "(545,)"),
        ("overlap", "(('09:00', '10:00'), ('09:30', '11:00'))"),
        ("free", "([('09:00', '09:30'), ('13:00', '14:00')], '09:00', '17:00')"),
    ),
    hidden_calls=(
        ("mins", "('00:05',)"),
        ("fmt", "(0,)"),
        ("overlap", "(('09:00', '10:00'), ('10:00', '11:00'))"),
        ("free", "([], '08:00', '08:45')"),
    ),
    bugs=(
        ("mins", "int(hours) * 60 + int(minutes)", "int(hours) * 100 + int(minutes)"),
        ("fmt", "minutes % 60:02d", "minutes % 100:02d"),
        ("overlap", "$mins(a[0]) < $mins(b[1])", "$mins(a[0]) <= $mins(b[1])"),
        ("free", "$mins(b) - $mins(a) for", "$mins(b) - $mins(a) + 1 for"),
    ),
    facade='''def $F(meetings, start, end):
    """'N min free, ends HH:MM' for a day from `start` to `end`."""
    return f"{$M.$free(meetings, start, end)} min free, ends {$M.$fmt($M.$mins(end))}"
''',
    facade_names=("day_summary", "availability"),
    facade_calls=("([('10:00', '10:45'), ('12:10', '13:00')], '09:00', '17:30')", "([], '08:00', '09:00')"),
)

UNITS = ModuleTemplate(
    domain="units",
    modules=("units", "convert", "measure"),
    names={
        "c2f": ("c_to_f", "fahrenheit"),
        "km": ("miles_to_km", "to_km"),
        "kg": ("lb_to_kg", "to_kg"),
        "KM": ("KM_PER_MILE", "MILE_KM"),
        "KG": ("KG_PER_LB", "LB_KG"),
    },
    source='''"""Unit conversions, rounded to two decimals."""

$KM = 1.609344
$KG = 0.45359237


def $c2f(celsius):
    """Degrees Celsius to Fahrenheit."""
    return round(celsius * 9 / 5 + 32, 2)


def $km(miles):
    """Miles to kilometres."""
    return round(miles * $KM, 2)


def $kg(pounds):
    """Pounds to kilograms."""
    return round(pounds * $KG, 2)
''',
    calls=(("c2f", "(25,)"), ("km", "(10,)"), ("kg", "(150,)")),
    hidden_calls=(("c2f", "(-40,)"), ("km", "(0.5,)"), ("kg", "(1,)")),
    bugs=(
        ("c2f", "celsius * 9 / 5 + 32", "celsius * 5 / 9 + 32"),
        ("km", "$KM = 1.609344", "$KM = 1.069344"),
        ("kg", "pounds * $KG", "pounds / $KG"),
        ("c2f", "+ 32, 2)", "- 32, 2)"),
    ),
    facade='''def $F(celsius, miles, pounds):
    """A weather-and-trip line in metric and imperial units."""
    return f"{$M.$c2f(celsius)}F, {$M.$km(miles)} km, {$M.$kg(pounds)} kg"
''',
    facade_names=("trip_line", "travel_summary"),
    facade_calls=("(30, 26.2, 20)", "(0, 1, 1)"),
)

TRAIN = (STATS, TEXT, INVENTORY, DATES, PARSING, MONEY)
HELD_OUT = (GEOMETRY, GRADES, SCHEDULE, UNITS)
TRAIN_PACKAGES = (
    "shopkit",
    "ledgerly",
    "tallyhub",
    "datebook",
    "textile",
    "stockroom",
    "metrica",
    "notekeep",
    "cartwise",
    "payroll",
    "orderly",
    "recordkit",
)
HELD_OUT_PACKAGES = ("fieldwork", "gridline", "coursebook", "dayplan", "metricon", "atlaskit")
FACADES = ("api", "service", "reports", "core")
