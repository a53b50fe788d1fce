#!/usr/bin/env python3
"""A strict parser of the Prometheus text exposition format (0.0.4), for the
integration tests of /metrics endpoints.

CLI:    promparse.py FILE|-     exits 0 and prints each sample as
                                `name{labels} value` (labels as written);
                                exits 1 with `promparse: line N: reason: LINE`
                                on stderr at the first offence.
Import: promparse.parse(text) -> {family: Family}; raises PromParseError.
        promparse.value(families, name, **labels) -> the sum of the samples
        called name whose labels include the given ones (0.0 when none).

Besides the format itself it checks the project's conventions: every
sample's family has a `# TYPE` line before it, families are not
interleaved, no sample appears twice, counters are named `..._total` (and
nothing else is), counter values are not negative, and a histogram's
buckets per label set are ascending in `le`, cumulative, end with
`le="+Inf"` and that bucket equals `_count`, with a `_sum` beside it.
"""
import math
import re
import sys

NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")


class PromParseError(Exception):
    def __init__(self, lineno, line, reason):
        super().__init__("line %d: %s: %s" % (lineno, reason, line))
        self.lineno, self.line, self.reason = lineno, line, reason


class Family:
    def __init__(self, name, mtype):
        self.name = name
        self.type = mtype
        self.help = None
        # (sample name, ((label, value), ...) in written order, float value, lineno)
        self.samples = []


def parse_value(text):
    if text in ("+Inf", "Inf"):
        return math.inf
    if text == "-Inf":
        return -math.inf
    if text == "NaN":
        return math.nan
    if not re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", text):
        raise ValueError("not a number: %r" % text)
    return float(text)


def parse_labels(text, pos):
    """Parses `{a="b",c="d"}` from text[pos] == '{'; returns (labels, end)."""
    labels = []
    pos += 1
    while True:
        if pos < len(text) and text[pos] == "}":
            return labels, pos + 1
        m = LABEL_NAME_RE.match(text, pos)
        if not m:
            raise ValueError("expected a label name at column %d" % (pos + 1))
        name = m.group(0)
        pos = m.end()
        if text[pos:pos + 2] != '="':
            raise ValueError('expected =" after label %s' % name)
        pos += 2
        value = []
        while True:
            if pos >= len(text):
                raise ValueError("unterminated value of label %s" % name)
            ch = text[pos]
            if ch == "\\":
                esc = text[pos + 1:pos + 2]
                if esc not in ("\\", '"', "n"):
                    raise ValueError("bad escape \\%s in label %s" % (esc, name))
                value.append("\n" if esc == "n" else esc)
                pos += 2
            elif ch == '"':
                pos += 1
                break
            elif ch == "\n":
                raise ValueError("newline in the value of label %s" % name)
            else:
                value.append(ch)
                pos += 1
        if any(k == name for k, _ in labels):
            raise ValueError("label %s given twice" % name)
        labels.append((name, "".join(value)))
        if pos < len(text) and text[pos] == ",":
            pos += 1
        elif pos < len(text) and text[pos] == "}":
            return labels, pos + 1
        else:
            raise ValueError("expected , or } after label %s" % name)


def family_of(sample, families):
    """The family a sample name belongs to, or None."""
    if sample in families and families[sample].type not in ("histogram", "summary"):
        return families[sample]
    for suffix in ("_bucket", "_sum", "_count"):
        if sample.endswith(suffix):
            base = families.get(sample[: -len(suffix)])
            if base and (base.type == "histogram" or (base.type == "summary" and suffix != "_bucket")):
                return base
    if sample in families and families[sample].type == "summary":
        return families[sample]
    return None


def check_histogram(fam):
    groups = {}
    for sname, labels, value, lineno in fam.samples:
        key = tuple(sorted((k, v) for k, v in labels if k != "le"))
        g = groups.setdefault(key, {"buckets": [], "sum": None, "count": None, "line": lineno})
        if sname == fam.name + "_bucket":
            le = [v for k, v in labels if k == "le"]
            if not le:
                raise PromParseError(lineno, sname, "histogram bucket without le")
            try:
                bound = parse_value(le[0])
            except ValueError:
                raise PromParseError(lineno, sname, "le is not a number: %r" % le[0])
            g["buckets"].append((bound, value, lineno, le[0]))
        elif sname == fam.name + "_sum":
            g["sum"] = value
        elif sname == fam.name + "_count":
            g["count"] = value
    for key, g in groups.items():
        what = "%s%s" % (fam.name, dict(key) if key else "")
        if not g["buckets"]:
            raise PromParseError(g["line"], what, "histogram without buckets")
        prev_bound, prev_count = -math.inf, 0.0
        for bound, count, lineno, text in g["buckets"]:
            if not bound > prev_bound:
                raise PromParseError(lineno, what, "le=%s is not above the previous bucket's" % text)
            if count < prev_count:
                raise PromParseError(lineno, what, "bucket le=%s is not cumulative (%g < %g)" % (text, count,
                                                                                                  prev_count))
            prev_bound, prev_count = bound, count
        last = g["buckets"][-1]
        if last[0] != math.inf:
            raise PromParseError(last[2], what, 'the last bucket is not le="+Inf"')
        if g["count"] is None or g["sum"] is None:
            raise PromParseError(g["line"], what, "histogram without _count or _sum")
        if g["count"] != last[1]:
            raise PromParseError(last[2], what, 'le="+Inf" bucket %g differs from _count %g' % (last[1], g["count"]))


def parse(text):
    families = {}
    seen = set()
    finished = set()       # families whose group of lines has ended
    current = None
    if text and not text.endswith("\n"):
        raise PromParseError(text.count("\n") + 1, text.rsplit("\n", 1)[-1], "the last line has no line feed")
    for lineno, line in enumerate(text.split("\n")[:-1] if text else [], 1):
        if line == "":
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 2 and parts[1] in ("HELP", "TYPE"):
                if len(parts) < 3 or not NAME_RE.fullmatch(parts[2]):
                    raise PromParseError(lineno, line, "bad metric name in # %s" % parts[1])
                name = parts[2]
                if name in finished or (current is not None and current.name != name and name in families):
                    raise PromParseError(lineno, line, "family %s is interleaved with another" % name)
                if current is not None and current.name != name:
                    finished.add(current.name)
                fam = families.get(name)
                if parts[1] == "TYPE":
                    mtype = parts[3].strip() if len(parts) > 3 else ""
                    if mtype not in TYPES:
                        raise PromParseError(lineno, line, "unknown type %r" % mtype)
                    if fam is not None and fam.type is not None:
                        raise PromParseError(lineno, line, "second # TYPE for %s" % name)
                    if fam is not None and fam.samples:
                        raise PromParseError(lineno, line, "# TYPE after samples of %s" % name)
                    if mtype == "counter" and not name.endswith("_total"):
                        raise PromParseError(lineno, line, "counter %s is not named ..._total" % name)
                    if mtype != "counter" and name.endswith("_total"):
                        raise PromParseError(lineno, line, "%s %s is named like a counter" % (mtype, name))
                    if fam is None:
                        fam = families[name] = Family(name, mtype)
                    fam.type = mtype
                else:
                    if fam is None:
                        fam = families[name] = Family(name, None)
                    if fam.help is not None:
                        raise PromParseError(lineno, line, "second # HELP for %s" % name)
                    fam.help = parts[3] if len(parts) > 3 else ""
                current = fam
            continue
        m = NAME_RE.match(line)
        if not m:
            raise PromParseError(lineno, line, "a sample must start with a metric name")
        sname = m.group(0)
        pos = m.end()
        labels = []
        if pos < len(line) and line[pos] == "{":
            try:
                labels, pos = parse_labels(line, pos)
            except ValueError as e:
                raise PromParseError(lineno, line, str(e))
        rest = line[pos:]
        if not rest.startswith(" "):
            raise PromParseError(lineno, line, "expected a space before the value")
        fields = rest.split(" ")[1:]
        if len(fields) not in (1, 2) or "" in fields:
            raise PromParseError(lineno, line, "expected `value [timestamp]` after the name")
        try:
            value = parse_value(fields[0])
        except ValueError as e:
            raise PromParseError(lineno, line, str(e))
        if len(fields) == 2 and not re.fullmatch(r"-?\d+", fields[1]):
            raise PromParseError(lineno, line, "the timestamp is not an integer")
        fam = family_of(sname, families)
        if fam is None or fam.type is None:
            raise PromParseError(lineno, line, "no # TYPE line for the family of %s" % sname)
        if fam is not current:
            raise PromParseError(lineno, line, "sample of %s outside its family's group of lines" % fam.name)
        key = (sname, tuple(sorted(labels)))
        if key in seen:
            raise PromParseError(lineno, line, "the same sample twice")
        seen.add(key)
        if fam.type == "counter" and not value >= 0:
            raise PromParseError(lineno, line, "a counter must not be negative")
        if fam.type == "histogram" and sname == fam.name:
            raise PromParseError(lineno, line, "a histogram sample must be _bucket, _sum or _count")
        fam.samples.append((sname, tuple(labels), value, lineno))
    for fam in families.values():
        if fam.type is None:
            raise PromParseError(0, fam.name, "# HELP without # TYPE")
        if fam.type == "histogram":
            check_histogram(fam)
    return families


def value(families, name, **labels):
    """Sum of the samples called name whose labels include all of labels."""
    total = 0.0
    for fam in families.values():
        for sname, slabels, v, _ in fam.samples:
            if sname == name and all(dict(slabels).get(k) == want for k, want in labels.items()):
                total += v
    return total


def format_sample(sname, labels, v):
    def esc(s):
        return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    text = ",".join('%s="%s"' % (k, esc(val)) for k, val in labels)
    num = "%d" % v if v == v and abs(v) != math.inf and v == int(v) else repr(v)
    return "%s%s %s" % (sname, "{%s}" % text if labels else "", num)


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: promparse.py FILE|-\n")
        return 2
    try:
        if argv[1] == "-":
            text = sys.stdin.read()
        else:
            with open(argv[1], encoding="utf-8") as f:
                text = f.read()
        families = parse(text)
    except PromParseError as e:
        sys.stderr.write("promparse: %s\n" % e)
        return 1
    except (OSError, UnicodeDecodeError) as e:
        sys.stderr.write("promparse: %s\n" % e)
        return 1
    for fam in families.values():
        for sname, labels, v, _ in fam.samples:
            print(format_sample(sname, labels, v))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
