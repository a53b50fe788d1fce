#!/usr/bin/env python3
"""A strict parser of the Prometheus text exposition format (0.0.4), for
tests: every sample line is `name{labels} value`, every family has one
# TYPE before its samples, names and label names are valid, counters end in
_total, histogram buckets are cumulative, end with le="+Inf" and equal
_count. parse(text) returns {(name, ((label, value), ...)): float}.

Usage: promparse.py FILE   prints `sample value` lines; exit 1 naming the
first offending line.
"""
import math
import re
import sys

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\["\\n])*)"')
SAMPLE_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


class ParseError(ValueError):
    pass


def _sample(line, lineno):
    """Splits `name{k="v",...} value` (values may hold any escaped text)."""
    m = SAMPLE_NAME.match(line)
    if not m:
        raise ParseError("line %d: not a sample: %r" % (lineno, line))
    name, pos, labels = m.group(0), m.end(), []
    if pos < len(line) and line[pos] == "{":
        pos += 1
        while line[pos:pos + 1] != "}":
            lm = LABEL.match(line, pos)
            if not lm:
                raise ParseError("line %d: bad label set: %r" % (lineno, line))
            labels.append((lm.group(1), lm.group(2)))
            pos = lm.end()
            if line[pos:pos + 1] == ",":
                pos += 1
            elif line[pos:pos + 1] != "}":
                raise ParseError("line %d: bad label set: %r" % (lineno, line))
        pos += 1
    rest = line[pos:]
    if not rest.startswith(" ") or " " in rest[1:] or len(rest) < 2:
        raise ParseError("line %d: expected one space and a value: %r" % (lineno, line))
    names = [k for k, _ in labels]
    if len(set(names)) != len(names):
        raise ParseError("line %d: repeated label: %r" % (lineno, line))
    return name, tuple(labels), rest[1:]


def _value(s, lineno):
    if s in ("+Inf", "-Inf", "NaN"):
        return float(s.replace("Inf", "inf").replace("NaN", "nan"))
    try:
        return float(s)
    except ValueError:
        raise ParseError("line %d: bad value %r" % (lineno, s))


def parse(text):
    types, samples = {}, {}
    if text and not text.endswith("\n"):
        raise ParseError("the last line has no newline")
    for lineno, line in enumerate(text.split("\n")[:-1], 1):
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] == "TYPE":
                name, typ = parts[2], parts[3] if len(parts) > 3 else ""
                if not NAME.match(name) or typ not in ("counter", "gauge", "histogram", "summary", "untyped"):
                    raise ParseError("line %d: bad TYPE line %r" % (lineno, line))
                if name in types:
                    raise ParseError("line %d: second TYPE for %s" % (lineno, name))
                if typ == "counter" and not name.endswith("_total"):
                    raise ParseError("line %d: counter %s does not end in _total" % (lineno, name))
                types[name] = typ
            elif len(parts) >= 3 and parts[1] == "HELP":
                if not NAME.match(parts[2]):
                    raise ParseError("line %d: bad HELP line %r" % (lineno, line))
            continue
        if not line.strip():
            raise ParseError("line %d: empty line" % lineno)
        name, labels, raw = _sample(line, lineno)
        value = _value(raw, lineno)
        family = name
        if name not in types:
            for suffix in ("_bucket", "_sum", "_count"):
                if name.endswith(suffix) and types.get(name[: -len(suffix)]) == "histogram":
                    family = name[: -len(suffix)]
        if family not in types:
            raise ParseError("line %d: sample %s before any TYPE of its family" % (lineno, name))
        key = (name, labels)
        if key in samples:
            raise ParseError("line %d: duplicate sample %r" % (lineno, line))
        if types[family] == "counter" and (value < 0 or math.isnan(value)):
            raise ParseError("line %d: counter %s is %r" % (lineno, name, value))
        samples[key] = value
    _check_histograms(types, samples)
    return samples


def _check_histograms(types, samples):
    for family, typ in types.items():
        if typ != "histogram":
            continue
        series = {}
        for (name, labels), v in samples.items():
            if name == family + "_bucket":
                le = dict(labels).get("le")
                if le is None:
                    raise ParseError("%s bucket without le" % family)
                rest = tuple(x for x in labels if x[0] != "le")
                series.setdefault(rest, []).append((float(le.replace("Inf", "inf")), v))
        for rest, buckets in series.items():
            buckets.sort()
            if not buckets or buckets[-1][0] != math.inf:
                raise ParseError("%s%s has no le=\"+Inf\" bucket" % (family, dict(rest)))
            counts = [c for _, c in buckets]
            if any(b < a for a, b in zip(counts, counts[1:])):
                raise ParseError("%s%s buckets are not cumulative" % (family, dict(rest)))
            count = samples.get((family + "_count", rest))
            if count is None or (family + "_sum", rest) not in samples:
                raise ParseError("%s%s has no _count or _sum" % (family, dict(rest)))
            if count != counts[-1]:
                raise ParseError("%s%s: +Inf bucket %r != _count %r" % (family, dict(rest), counts[-1], count))


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        with open(sys.argv[1], encoding="utf-8") as fh:
            samples = parse(fh.read())
    except (ParseError, UnicodeDecodeError) as e:
        print("promparse: %s: %s" % (sys.argv[1], e), file=sys.stderr)
        return 1
    for (name, labels), v in sorted(samples.items()):
        lab = ",".join('%s="%s"' % kv for kv in labels)
        print("%s%s %r" % (name, "{%s}" % lab if lab else "", v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
