#!/usr/bin/env python3
"""Events API client for test_events.sh.

latency POLL_URL TRIGGER_URL READER_TOKEN ADMIN_TOKEN TENANT ROUNDS
    Each round: a reader long-polls GET POLL_URL/v1/events?after=NEWEST&wait=20
    while another thread, once the poll is parked, changes TENANT's policy on
    TRIGGER_URL (a tenant.policy event, committed before that request is
    answered). The wake latency of a round is bounded above by the time from
    sending the trigger to the long-poll's answer, and below by the time from
    the trigger's answer to it; both are printed. Exits 1 when the median
    upper bound reaches 100 ms, a lower bound does (the poll still parked
    100 ms after the event was committed and answered), or the poll returned
    something else. (The median: one round's upper bound also holds the
    trigger request's own time, which a loaded machine stretches now and
    then: a CI run saw 101 ms, 25 ms of it after the answer.)
page URL TOKEN
    Pages through every event the token sees with limit=2 and compares with
    one read of limit=1000: same ids, none missing, none twice, ascending.
"""
import json
import sys
import threading
import time
import urllib.request


def get(url, token, timeout=40):
    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def put(url, token, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="PUT",
                                 headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def latency(poll_url, trigger_url, reader, admin, tenant, rounds):
    import statistics
    worst = 0.0
    bad = False
    uppers = []
    for i in range(rounds):
        newest = get(poll_url + "/v1/events?tail=1", reader)["next_after"]
        out = {}

        def poll():
            out["doc"] = get("%s/v1/events?after=%d&wait=20" % (poll_url, newest), reader)
            out["t"] = time.monotonic()

        th = threading.Thread(target=poll)
        th.start()
        time.sleep(0.4)  # the poll is parked by now
        t_sent = time.monotonic()
        put("%s/v1/tenants/%s/policy" % (trigger_url, tenant), admin, {"max_sandboxes": 50 + i})
        t_answered = time.monotonic()
        th.join(30)
        if "t" not in out:
            print("round %d: the long-poll did not return" % (i + 1))
            return 1
        events = out["doc"]["events"]
        kinds = [e["kind"] for e in events]
        upper = (out["t"] - t_sent) * 1000
        lower = max(0.0, (out["t"] - t_answered) * 1000)
        worst = max(worst, upper)
        uppers.append(upper)
        ok = lower < 100 and kinds and kinds[0] == "tenant.policy" and events[0]["id"] > newest
        bad = bad or not ok
        print("round %d: woke %.1f ms after the trigger was sent (%.1f ms after it was answered), events %s%s"
              % (i + 1, upper, lower, kinds, "" if ok else "  <-- FAIL"))
    med = statistics.median(uppers)
    print("worst wake latency: %.1f ms, median %.1f ms%s" % (worst, med, "" if med < 100 else "  <-- FAIL"))
    return 1 if bad or med >= 100 else 0


def page(url, token):
    big = get(url + "/v1/events?after=0&limit=1000", token)
    want = [e["id"] for e in big["events"]]
    got, cursor, calls = [], 0, 0
    while True:
        doc = get("%s/v1/events?after=%d&limit=2" % (url, cursor), token)
        calls += 1
        ids = [e["id"] for e in doc["events"]]
        if len(ids) > 2:
            print("a page of limit=2 held %d events" % len(ids))
            return 1
        if not ids:
            if doc["next_after"] != cursor:
                print("an empty page moved the cursor from %d to %d" % (cursor, doc["next_after"]))
                return 1
            break
        if doc["next_after"] != ids[-1]:
            print("next_after %d is not the last id %d" % (doc["next_after"], ids[-1]))
            return 1
        got += ids
        cursor = doc["next_after"]
    # events that arrived during the paging are fine at the end
    if got[:len(want)] != want or len(set(got)) != len(got) or got != sorted(got):
        print("paged ids differ from the one read:\n  paged %s\n  one   %s" % (got, want))
        return 1
    print("paged %d events in %d calls of limit=2, same as one read of %d" % (len(got), calls, len(want)))
    return 0


def main():
    if len(sys.argv) >= 8 and sys.argv[1] == "latency":
        return latency(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], int(sys.argv[7]))
    if len(sys.argv) == 4 and sys.argv[1] == "page":
        return page(sys.argv[2], sys.argv[3])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
