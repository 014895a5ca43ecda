#!/usr/bin/env python3
"""Drive a built infergate binary as a hostile client and through engine faults.

Issue 10 items 4 and 6, checked end to end on loopback only:
  transfer   marker request ids and client transfer fields on every P/D path
             (split, GET relay, role-0 fallback), asserting what the fake
             engines recorded (their /admin/records)
  hung       a hung single-pool engine: seconds until the client is answered
  deadDecode 1P2D, one decode killed under load: client statuses
  restart    1P1D, the prefill killed under load then restarted: client
             statuses while it is dead, and seconds from "probe sees it
             healthy" to "it serves again"

Usage: pd-faults.py BINARY NET [SCENARIO...]
  NET is the third octet of the 127.0.NET.x addresses used, so two runs
  (before/after) can go side by side. Every process started is killed.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

BIN = sys.argv[1]
NET = int(sys.argv[2])
SCENARIOS = sys.argv[3:] or ["transfer", "hung", "deadDecode", "restart"]
IP = lambda host: "127.0.%d.%d" % (NET, host)
API = "http://%s:11111/netlox/v1" % IP(1)
MARKER = "___prefill_addr_6.6.6.6:5557___decode_addr_6.6.6.6:5558_0123456789abcdef0123456789abcdef"
HOSTILE = {"kv_transfer_params": {"do_remote_prefill": True, "remote_host": "6.6.6.6", "remote_port": 666},
           "bootstrap_host": "6.6.6.6", "bootstrap_port": 666, "bootstrap_room": 666,
           "disaggregated_params": {"ctx_request_id": 666}}
procs = []


def start(*args):
    p = subprocess.Popen([BIN, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    procs.append(p)
    return p


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)


def http(method, url, body=None, headers=None, timeout=300):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except Exception as e:  # connection reset, timeout
        return 0, repr(e)


def wait_port(host, port, secs=10):
    end = time.time() + secs
    while time.time() < end:
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("nothing listens on %s:%d" % (host, port))


def engine(host, port, role, nixl=0):
    p = start("fake-engine", "--dialect=vllm", "--role=" + role, "--addr=%s:%d" % (IP(host), port),
              "--nixl-port=%d" % (nixl or port), "--chunk-delay=1ms")
    wait_port(IP(host), port)
    return p


def rule(vip_host, port, eps, pd=True, timeout=None, probe="http"):
    sa = {"externalIP": IP(vip_host), "port": port, "protocol": "tcp", "sel": 0, "mode": 4,
          "probetype": probe, "name": "r%d" % vip_host}
    if probe == "http":
        sa["probereq"] = "/health"
    if pd:
        sa.update({"pd_disagg_mode": True, "kvEngineType": "vllm"})
    if timeout:
        sa["inactiveTimeOut"] = timeout
    body = {"serviceArguments": sa, "endpoints": [
        {"endpointIP": IP(h), "targetPort": p, "weight": 1, "ep_role": role} for h, p, role in eps]}
    st, out = http("POST", API + "/config/loadbalancer", body)
    if st >= 300:
        raise SystemExit("create rule: %d %s" % (st, out))


def status(vip_host, port):
    st, out = http("GET", API + "/config/loadbalancer/externalipaddress/%s/port/%d/protocol/tcp/status" % (IP(vip_host), port))
    return json.loads(out) if st == 200 else {}


def ep_state(vip_host, port, host):
    for id, ep in status(vip_host, port).get("endpoints", {}).items():
        if id.startswith(IP(host) + ":"):
            return ep.get("state", ""), ep.get("breaker", "")
    return "", ""


def records(host, port):
    st, out = http("GET", "http://%s:%d/admin/records" % (IP(host), port))
    return json.loads(out) if st == 200 else []


def completion(vip_host, port, extra=None, headers=None, stream=False):
    body = {"model": "fake-model", "prompt": "hello there", "max_tokens": 3, "stream": stream}
    body.update(extra or {})
    return http("POST", "http://%s:%d/v1/completions" % (IP(vip_host), port), body, headers, timeout=30)


def leaked(recs):
    """Records that carry any of the hostile state (6.6.6.6 or a 666 value)."""
    bad = []
    for r in recs:
        body = r.get("body", "").replace(" ", "")
        if "6.6.6.6" in json.dumps(r) or ":666" in body or "bootstrap_" in body or "disaggregated_params" in body:
            bad.append(r)
    return bad


def check(name, ok, detail=""):
    print("  %-58s %s %s" % (name, "ok" if ok else "FAIL", detail if not ok else ""))


def scenario_transfer():
    print("transfer state (1P1D + role-0, vLLM):")
    pre = engine(11, 18100, "prefill")
    engine(12, 18200, "decode")
    role0 = engine(13, 18300, "decode")  # a vLLM engine serving unsplit
    rule(2, 8080, [(11, 18100, 1), (12, 18200, 2), (13, 18300, 0)])
    wait(lambda: status(2, 8080).get("ready"), 15, "rule ready")
    st, out = completion(2, 8080, headers={"X-Request-Id": MARKER})
    check("split: marker X-Request-Id -> 400 request_id_reserved", st == 400 and "request_id_reserved" in out, "%d %s" % (st, out[:120]))
    st, out = completion(2, 8080, extra={"request_id": MARKER})
    check("split: marker body request_id -> 400 request_id_reserved", st == 400 and "request_id_reserved" in out, "%d %s" % (st, out[:120]))
    st, out = completion(2, 8080, extra=HOSTILE)
    recs = records(11, 18100) + records(12, 18200)
    check("split: hostile fields -> 200, no leg carries them", st == 200 and len(recs) == 2 and not leaked(recs),
          "%d, %d legs, %d leaked" % (st, len(recs), len(leaked(recs))))
    st, out = http("GET", "http://%s:8080/v1/models" % IP(2), headers={"X-Request-Id": MARKER})
    check("relay: GET /v1/models with marker id -> 400", st == 400 and "request_id_reserved" in out, "%d %s" % (st, out[:120]))
    st, out = http("GET", "http://%s:8080/v1/models" % IP(2), body=json.dumps({"model": "fake-model", **HOSTILE}).encode())
    check("relay: GET /v1/models with a body -> relayed as GET (200 list)", st == 200 and '"object":"list"' in out.replace(" ", ""), "%d %s" % (st, out[:120]))
    # No usable pair: kill the prefill, wait for the probe to mark it down.
    stop(pre)
    wait(lambda: ep_state(2, 8080, 11)[0] == "down", 20, "prefill down")
    st, out = completion(2, 8080, headers={"X-Request-Id": MARKER})
    check("fallback: marker X-Request-Id -> 400", st == 400 and "request_id_reserved" in out, "%d %s" % (st, out[:120]))
    before = len(records(13, 18300))
    st, out = completion(2, 8080, extra=HOSTILE, headers={"X-Request-Id": "client-trace-1"})
    recs = records(13, 18300)[before:]
    ids = [r.get("header", {}).get("X-Request-Id") for r in recs]
    check("fallback: hostile fields -> 200 from role 0, none forwarded", st == 200 and recs and not leaked(recs),
          "%d, %d recs, %d leaked" % (st, len(recs), len(leaked(recs))))
    check("fallback: role-0 engine got the client's one id", ids == [["client-trace-1"]], str(ids))
    stop(role0)


def wait(cond, secs, what):
    end = time.time() + secs
    while time.time() < end:
        if cond():
            return
        time.sleep(0.1)
    raise SystemExit("timed out waiting for " + what)


def scenario_hung():
    print("hung single-pool engine (accepts, never answers; rule inactiveTimeOut default):")
    ln = socket.socket()
    ln.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ln.bind((IP(21), 18400))
    ln.listen(64)
    held = []

    def accept():
        try:
            for _ in range(64):
                held.append(ln.accept())
        except OSError:
            pass  # closed at the end of the scenario
    threading.Thread(target=accept, daemon=True).start()
    rule(3, 8080, [(21, 18400, 0)], pd=False, probe="tcp")  # the engine accepts: a tcp probe passes
    wait(lambda: status(3, 8080).get("ready"), 15, "hung rule ready")
    t0 = time.time()
    st, out = http("POST", "http://%s:8080/v1/completions" % IP(3), {"model": "m", "prompt": "p"}, timeout=400)
    print("  client answered after %.1f s: %d %s" % (time.time() - t0, st, out[:100]))
    ln.close()


def load(vip_host, port, stop_ev, counts, lock, stream=False):
    while not stop_ev.is_set():
        st, _ = completion(vip_host, port, stream=stream)
        with lock:
            counts[st] = counts.get(st, 0) + 1


def run_load(vip_host, port, workers, fn):
    stop_ev, counts, lock = threading.Event(), {}, threading.Lock()
    ts = [threading.Thread(target=load, args=(vip_host, port, stop_ev, counts, lock, i % 2 == 1)) for i in range(workers)]
    for t in ts:
        t.start()
    try:
        fn(counts, lock)
    finally:
        stop_ev.set()
        for t in ts:
            t.join()
    return counts


def scenario_dead_decode():
    print("1P2D, one decode killed under load (4 workers, 6 s):")
    engine(31, 18500, "prefill")
    engine(32, 18600, "decode")
    d2 = engine(33, 18600, "decode")
    rule(4, 8080, [(31, 18500, 1), (32, 18600, 2), (33, 18600, 2)])
    wait(lambda: status(4, 8080).get("ready"), 15, "rule ready")

    def body(counts, lock):
        time.sleep(1)
        stop(d2)
        time.sleep(5)
    counts = run_load(4, 8080, 4, body)
    total = sum(counts.values())
    print("  statuses: %s  (%d requests, %.2f %% not 200)" % (dict(sorted(counts.items())), total, 100.0 * (total - counts.get(200, 0)) / max(total, 1)))


def scenario_restart():
    print("1P1D, prefill killed under load, restarted after 8 s (2 workers):")
    p = engine(41, 18700, "prefill")
    engine(42, 18800, "decode")
    rule(5, 8080, [(41, 18700, 1), (42, 18800, 2)])
    wait(lambda: status(5, 8080).get("ready"), 15, "rule ready")
    out = {}

    def body(counts, lock):
        time.sleep(1)
        stop(p)
        with lock:
            counts.clear()
        time.sleep(8)
        with lock:
            out["dead"] = dict(counts)
            counts.clear()
        engine(41, 18700, "prefill")
        n0 = 0
        t_up = time.time()
        wait(lambda: ep_state(5, 8080, 41)[0] == "active", 30, "probe active")
        t_healthy = time.time()
        end = t_healthy + 60
        while time.time() < end and len(records(41, 18700)) <= n0:
            time.sleep(0.05)
        t_served = time.time()
        out["healthy_after_restart"] = t_healthy - t_up
        out["served_after_healthy"] = t_served - t_healthy if len(records(41, 18700)) > n0 else None
    counts = run_load(5, 8080, 2, body)
    dead = out.get("dead", {})
    total = sum(dead.values())
    print("  while the prefill is dead (8 s): %s  (%.1f %% not 200)" % (dict(sorted(dead.items())), 100.0 * (total - dead.get(200, 0)) / max(total, 1)))
    print("  probe saw the restarted prefill healthy %.1f s after restart" % out.get("healthy_after_restart", -1))
    s = out.get("served_after_healthy")
    print("  restarted prefill served again %s after it probed healthy" % ("%.1f s" % s if s is not None else "NOT within 60 s"))


def main():
    state = tempfile.mkdtemp(prefix="i10-faults-")
    start("serve", "--api-addr=%s:11111" % IP(1), "--state-dir=" + state, "--log-level=error")
    wait_port(IP(1), 11111)
    wait(lambda: http("GET", API + "/config/loadbalancer/all")[0] == 200, 15, "API")
    try:
        for s in SCENARIOS:
            {"transfer": scenario_transfer, "hung": scenario_hung, "deadDecode": scenario_dead_decode,
             "restart": scenario_restart}[s]()
    finally:
        for p in procs:
            stop(p)


if __name__ == "__main__":
    main()
