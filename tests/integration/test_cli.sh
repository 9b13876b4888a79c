#!/usr/bin/env bash
# The cistern CLI's own checks, against a real master (file:// mounts, no
# workers) and a fake one (a small Python server) for what a master seldom
# does: restart under a waiting `load`, answer something that is not JSON.
# Usage errors exit 2 and name the flag or argument; nothing is dropped or
# rounded without a word. Store names reach a terminal as text, never as
# terminal commands.
source "$CIS_SRC/tests/integration/lib/common.sh"
source "$CIS_SRC/tests/integration/lib/master.sh"

MASTER=$CIS_BUILD/master/cistern-master
CLI=$CIS_BUILD/cli/cistern
[ -x "$MASTER" ] && [ -x "$CLI" ] || fail "build cistern-master and cistern first"

RPC=$(free_port)
HTTP=$(free_port)
export CISTERN_API=127.0.0.1:$HTTP
master_up "$CIS_TMP/master" "$RPC" "$HTTP" --list-ahead 0

# run_cli ARGS...: $out (stdout and stderr) and $rc of one CLI run.
run_cli() {
	rc=0
	out=$("$CLI" "$@" 2>&1) || rc=$?
}

# usage_error WHAT NEEDLE ARGS...: the CLI exits 2 saying NEEDLE.
usage_error() {
	local what=$1 needle=$2
	shift 2
	run_cli "$@"
	assert_eq "$rc" 2 "$what: exit status (output: $out)"
	assert_contains "$out" "$needle" "$what"
}

STORE=$CIS_TMP/store
mkdir -p "$STORE/d3/sub" "$STORE/big"
echo x >"$STORE/d3/a.txt"
echo y >"$STORE/d3/sub/b.txt"
(cd "$STORE/big" && seq -f 'f%04g' 2500 | xargs touch)
run_cli mount /data "file://$STORE"
assert_eq "$rc" 0 "mount /data: $out"

# ---- --version after a command ----
for cmd in ls mounts load; do
	run_cli "$cmd" --version
	assert_eq "$rc" 0 "cistern $cmd --version: exit status (output: $out)"
	[[ "$out" =~ ^cistern\ [0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "cistern $cmd --version: '$out'"
done

# ---- an empty --api is refused, not the default ----
usage_error "--api=" "--api: empty address" --api= mounts
usage_error "--api ''" "--api: empty address" --api "" mounts
usage_error "--api (last)" "--api: needs HOST:PORT" --api

# ---- mount options that JSON cannot carry are refused, never dropped ----
SECRET_BYTES=$'s3cr\xffet'
usage_error "-o non-UTF-8" "--option fsync: the value is not valid UTF-8" \
	mount /m5 "file://$STORE" -o "fsync=$SECRET_BYTES"
assert_not_contains "$out" "s3cr" "a refused option's value is not shown"
export CIS_BAD_VAR=$SECRET_BYTES
usage_error "--option-env non-UTF-8" "--option-env secret_key: the value is not valid UTF-8" \
	mount /m5 "file://$STORE" --option-env secret_key=CIS_BAD_VAR
assert_not_contains "$out" "s3cr" "a refused option's value is not shown"
usage_error "a 200-byte option key" "the key is over 127 bytes" \
	mount /m5 "file://$STORE" -o "$(printf 'k%.0s' $(seq 200))=v"
assert_not_contains "$("$CLI" mounts)" "/m5" "a refused mount was made"

# ---- flag values checked by the CLI, naming the flag ----
usage_error "--sync-interval 5x" "--sync-interval 5x: not a duration" \
	mount /m6 "file://$STORE" --sync-interval 5x
# the master's bound, 100 years (366-day ones), is the CLI's
usage_error "--sync-interval 36601d" "--sync-interval 36601d: too long (at most 100 years)" \
	mount /m6 "file://$STORE" --sync-interval 36601d
usage_error "--sync-interval 40000d" "--sync-interval 40000d: too long" \
	mount /m6 "file://$STORE" --sync-interval 40000d
run_cli mount /m100y "file://$STORE" --sync-interval 36600d
assert_eq "$rc" 0 "mount --sync-interval 36600d (100 years): $out"
run_cli unmount /m100y
assert_eq "$rc" 0 "unmount /m100y: $out"
usage_error "--block-size 4X" "--block-size 4X: not a size" \
	mount /m6 "file://$STORE" --block-size 4X
usage_error "--block-size 1K" "--block-size 1K: out of range" \
	mount /m6 "file://$STORE" --block-size 1K
usage_error "--bandwidth 16000P" "--bandwidth 16000P: too large" load /data/d3 --bandwidth 16000P
usage_error "--bandwidth 5q" "--bandwidth 5q: not a rate" load /data/d3 --bandwidth 5q
# 0 is the master's "no cap": given as a cap, it is a mistake.
usage_error "--bandwidth 0" "--bandwidth 0: at least 1 byte per second" load /data/d3 --bandwidth 0
usage_error "--replicas ' 2'" "--replicas  2: want a number" load /data/d3 --replicas " 2"
assert_not_contains "$("$CLI" mounts)" "/m6" "a refused mount was made"

# ---- mounts shows exact values ----
mkdir -p "$CIS_TMP/s500" "$CIS_TMP/s1500"
run_cli mount /s500 "file://$CIS_TMP/s500" --sync-interval 500ms --block-size 4097
assert_eq "$rc" 0 "mount /s500: $out"
run_cli mount /s1500 "file://$CIS_TMP/s1500" --sync-interval 1500ms --block-size 1536K
assert_eq "$rc" 0 "mount /s1500: $out"
out=$("$CLI" mounts)
assert_contains "$out" "block_size=4097 B sync=500ms" "500 ms and 4097 bytes, not 0s and 4.0 KiB"
assert_contains "$out" "block_size=1.5 MiB sync=1500ms" "1500 ms, not 1s"
assert_contains "$(printf '%s\n' "$out" | grep '^/data ')" "block_size=4.0 MiB sync=300s" \
	"the defaults as before"

# ---- ls --json: one document per directory, -R one document ----
"$CLI" ls --json /data/big >"$CIS_TMP/ls.json" || fail "ls --json /data/big"
python3 - "$CIS_TMP/ls.json" <<'PY' || fail "ls --json: not one document of 2500 entries"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["path"] == "/data/big" and d["eof"] is True, d.keys()
assert len(d["entries"]) == 2500, len(d["entries"])
assert len({e["name"] for e in d["entries"]}) == 2500
PY
"$CLI" ls -R --json /data/d3 >"$CIS_TMP/lsr.json" || fail "ls -R --json /data/d3"
python3 - "$CIS_TMP/lsr.json" <<'PY' || fail "ls -R --json: not one array of directory documents"
import json, sys
d = json.load(open(sys.argv[1]))
assert [x["path"] for x in d] == ["/data/d3", "/data/d3/sub"], d
assert sorted(e["name"] for e in d[0]["entries"]) == ["a.txt", "sub"]
assert [e["name"] for e in d[1]["entries"]] == ["b.txt"]
PY
# -R over a directory of three pages: one array, every entry once
"$CLI" ls -R --json /data >"$CIS_TMP/lsr.json" || fail "ls -R --json /data"
python3 - "$CIS_TMP/lsr.json" <<'PY' || fail "ls -R --json /data: not one array with every entry"
import json, sys
d = {x["path"]: x for x in json.load(open(sys.argv[1]))}
assert sorted(d) == ["/data", "/data/big", "/data/d3", "/data/d3/sub"], sorted(d)
assert all(x["eof"] is True for x in d.values())
assert len({e["name"] for e in d["/data/big"]["entries"]}) == 2500
assert len(d["/data/big"]["entries"]) == 2500
PY
# --json prints each page as it comes: its memory is one page's, not the
# directory's (30,000 entries cost 80 MB more when they were gathered first)
mkdir -p "$STORE/wide"
(cd "$STORE/wide" && seq -f 'file-with-a-longish-name-%06g' 30000 | xargs touch)
run_cli mount /wide "file://$STORE/wide"
assert_eq "$rc" 0 "mount /wide: $out"
# max_rss ARGS...: the peak resident KiB of one CLI run, its output dropped
max_rss() {
	python3 -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$CLI" "$@"
}
rss_text=$(max_rss ls /wide) || fail "ls /wide"
rss_json=$(max_rss ls --json /wide) || fail "ls --json /wide"
[ "$rss_json" -lt $((rss_text + 16384)) ] ||
	fail "ls --json of 30,000 entries: peak RSS ${rss_json} KiB, ls without --json ${rss_text} KiB"
"$CLI" ls --json /wide | python3 -c 'import json, sys
d = json.load(sys.stdin)
assert len({e["name"] for e in d["entries"]}) == 30000 and d["eof"] is True' ||
	fail "ls --json /wide: not one document of 30,000 entries"
run_cli unmount /wide

# ---- extra arguments are refused ----
usage_error "ls /a /b" "ls: too many arguments" ls /data/d3 /data/big
usage_error "jobs foo bar" "jobs: too many arguments" jobs foo bar
usage_error "report extra" "report: too many arguments" report extra
usage_error "stat /a /b" "stat: too many arguments" stat /data/d3 /data/big
usage_error "mount P U X" "mount: too many arguments" mount /x "file://$STORE" extra
usage_error "job 1 2" "job: too many arguments" job 1 2

# ---- job ids and counts: digits only, in range ----
usage_error "job 2^66" "99999999999999999999: not a job ID" job 99999999999999999999
usage_error "job ' 2'" "not a job ID" job " 2"
usage_error "job +2" "+2: not a job ID" job +2
usage_error "job cancel 0" "0: not a job ID" job cancel 0
usage_error "setrep P ' 3'" "setrep: N must be 1..64" setrep /data " 3"
usage_error "ttl P +5" "ttl: +5: want SECONDS" ttl /data +5
usage_error "ttl over 100 years" "1 to 3162240000: 100 years" ttl /data 99999999999
usage_error "job --limit 0x10" "--limit 0x10: want a number" job 1 --limit 0x10

# ---- paths that are not UTF-8 ----
BAD=$'/data/\xff'
for cmd in "pin" "unpin" "load" "free" "sync" "setrep 2" "ttl 60"; do
	set -- $cmd
	usage_error "$1 non-UTF-8" "$1: $BAD: not valid UTF-8" "$1" "$BAD" "${@:2}"
done
usage_error "mount non-UTF-8" "mount: $BAD: not valid UTF-8" mount "$BAD" "file://$STORE"
usage_error "mount non-UTF-8 uri" "not valid UTF-8" mount /m7 "file://$STORE/"$'\xff'
# In a query it can go, and the master's error about it is still JSON.
run_cli stat "$BAD"
assert_eq "$rc" 1 "stat of a missing non-UTF-8 path: $out"
assert_contains "$out" "no such file or directory" "the master's error, not 'unexpected reply'"
assert_not_contains "$out" "unexpected reply" "stat non-UTF-8"

# ---- errors say their subject once ----
run_cli job cancel 999
assert_eq "$rc" 1 "job cancel 999: $out"
assert_contains "$out" "cistern: job 999: " "job cancel 999"
assert_not_contains "$out" "job 999: job 999" "job cancel 999"
run_cli pin /data/d3
assert_eq "$rc" 1 "pin /data/d3 with no cache: $out"
assert_contains "$out" "cistern: pin /data/d3: " "pin /data/d3"
assert_not_contains "$out" "pin /data/d3: pin /data/d3" "pin /data/d3"
run_cli ls ""
assert_contains "$out" "cistern: ls '': " "an empty path is quoted"

# ---- a fake master: restarts under `load`, answers that are not JSON ----
FPORT=$(free_port)
cat >"$CIS_TMP/fake.py" <<'PY'
# fake.py PORT MODE: "running" (a job that runs), "done" (it ended),
# "gone" (no such job), "html" (a proxy's error page for everything),
# "empty" (200 with {} to a job submitted),
# "lsfail" (ls /d: a page of 999 files and a directory, then an error;
# /d/sub lists).
import json, sys
from urllib.parse import parse_qs, urlsplit
from http.server import BaseHTTPRequestHandler, HTTPServer
port, mode = int(sys.argv[1]), sys.argv[2]
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def reply(self, code, body, ctype="application/json"):
        b = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def job(self, state):
        return json.dumps({"job": {"id": 26, "type": "load", "path": "/data/d3",
            "state": state, "listing_done": True, "files_seen": 2,
            "counts": {"files": 2 if state == "done" else 1, "files_failed": 0},
            "failures": []}})
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if mode == "html":
            return self.reply(502, "<html>bad gateway</html>", "text/html")
        if mode == "empty":
            return self.reply(200, "{}")
        self.reply(200, json.dumps({"job": {"id": 26}}))
    def ls(self):
        q = parse_qs(urlsplit(self.path).query)
        path, cookie = q["path"][0], int(q.get("cookie", ["0"])[0])
        if path == "/d" and cookie:
            return self.reply(500, json.dumps({"error": "store went away"}))
        names = ["f%04d" % i for i in range(999)] + ["sub"] if path == "/d" else ["b.txt"]
        ents = [{"name": n, "path": path + "/" + n, "type": "dir" if n == "sub" else "file"}
                for n in names]
        self.reply(200, json.dumps({"path": path, "entries": ents,
                                    "next_cookie": len(ents), "eof": path != "/d"}))
    def do_GET(self):
        if mode == "lsfail" and self.path.startswith("/api/v1/ls?"):
            return self.ls()
        if mode == "html":
            return self.reply(502, "<html>bad gateway</html>", "text/html")
        if mode == "gone":
            return self.reply(404, json.dumps({"error": "job 26: no such job"}))
        self.reply(200, self.job(mode))
HTTPServer(("127.0.0.1", port), H).serve_forever()
PY
start_fake() {
	python3 "$CIS_TMP/fake.py" "$FPORT" "$1" &
	FPID=$!
	cis_on_exit "kill $FPID"
	wait_for 10 curl -sS -o /dev/null "http://127.0.0.1:$FPORT/api/v1/job"
}
start_fake running
"$CLI" --api "127.0.0.1:$FPORT" load /data/d3 >"$CIS_TMP/load.out" 2>&1 &
LPID=$!
sleep 1
kill_pid "$FPID" # the master goes away for 2 s, then comes back with the job done
sleep 2
kill -0 "$LPID" 2>/dev/null || fail "load gave up while the master was away: $(cat "$CIS_TMP/load.out")"
start_fake done
lrc=0
wait "$LPID" || lrc=$?
assert_eq "$lrc" 0 "load across a master restart: $(cat "$CIS_TMP/load.out")"
assert_contains "$(cat "$CIS_TMP/load.out")" "load /data/d3 (job 26): cannot reach master" \
	"the wait says which job it waits for"
assert_contains "$(cat "$CIS_TMP/load.out")" "job 26 load /data/d3: done" "the summary"
kill_pid "$FPID"

start_fake gone
run_cli --api "127.0.0.1:$FPORT" load /data/d3
assert_eq "$rc" 1 "load of a job that went away: $out"
assert_contains "$out" "cistern: load /data/d3 (job 26): no such job" "the job is named once"
kill_pid "$FPID"

# ---- ls --json that fails part-way: the document ends, "eof": false ----
start_fake lsfail
rc=0
"$CLI" --api "127.0.0.1:$FPORT" ls --json /d >"$CIS_TMP/lsfail.json" 2>"$CIS_TMP/lsfail.err" ||
	rc=$?
assert_eq "$rc" 1 "ls --json failing on its second page: $(cat "$CIS_TMP/lsfail.err")"
assert_contains "$(cat "$CIS_TMP/lsfail.err")" "cistern: ls /d: store went away" "the error"
python3 - "$CIS_TMP/lsfail.json" <<'PY' || fail "ls --json failing part-way: $(head -c 300 "$CIS_TMP/lsfail.json")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["path"] == "/d" and d["eof"] is False and len(d["entries"]) == 1000, d["eof"]
PY
rc=0
"$CLI" --api "127.0.0.1:$FPORT" ls -R --json /d >"$CIS_TMP/lsfail.json" 2>"$CIS_TMP/lsfail.err" ||
	rc=$?
assert_eq "$rc" 1 "ls -R --json failing part-way: $(cat "$CIS_TMP/lsfail.err")"
python3 - "$CIS_TMP/lsfail.json" <<'PY' || fail "ls -R --json failing part-way: $(head -c 300 "$CIS_TMP/lsfail.json")"
import json, sys
d = json.load(open(sys.argv[1]))
assert [(x["path"], x["eof"], len(x["entries"])) for x in d] == \
    [("/d", False, 1000), ("/d/sub", True, 1)], [(x["path"], x["eof"]) for x in d]
PY
kill_pid "$FPID"

# A 2xx without a job id is not the master's answer: no "0" for a script
# to wait on.
start_fake empty
for cmd in "load --detach" "free --detach" load; do
	run_cli --api "127.0.0.1:$FPORT" $cmd /data/d3
	assert_eq "$rc" 1 "$cmd answered {}: $out"
	assert_contains "$out" "the answer has no job id" "$cmd answered {}"
done
kill_pid "$FPID"

start_fake html
run_cli --api "127.0.0.1:$FPORT" report
assert_eq "$rc" 1 "report from a proxy's error page: $out"
assert_contains "$out" "unexpected reply from master (HTTP 502 to GET /api/v1/report" \
	"the status and the request"
kill_pid "$FPID"

# A name in the store holding terminal commands (ESC ] 2 ; retitles the
# window, ESC [ 2 J clears the screen): on a terminal (script(1) gives one)
# ls shows its control characters as \xNN; through a pipe, the bytes.
log "store names with terminal control characters"
mkdir -p "$STORE/esc"
touch "$STORE/esc/$(printf 'x\033]2;owned\007\033[2Jy')" "$STORE/esc/$(printf 'two\nlines')"
"$CLI" sync /data >/dev/null || fail "sync /data"
script -qec "'$CLI' --api 127.0.0.1:$HTTP ls /data/esc" /dev/null >"$CIS_TMP/tty.out" 2>&1 ||
	fail "ls on a terminal: $(cat "$CIS_TMP/tty.out")"
grep -q $'\033' "$CIS_TMP/tty.out" && fail "ls wrote an ESC to the terminal: $(od -c "$CIS_TMP/tty.out" | head -3)"
assert_contains "$(cat "$CIS_TMP/tty.out")" 'x\x1b]2;owned\x07\x1b[2Jy' "ls on a terminal"
# A newline in a name would make it read as two entries.
assert_contains "$(cat "$CIS_TMP/tty.out")" 'two\x0alines' "a name holding a newline, on a terminal"
"$CLI" ls /data/esc | grep -q $'\033' || fail "ls through a pipe changed the name's bytes"
# load's progress bar on a terminal goes through the same filter: it
# clears what the last bar left with spaces, not an escape shown as text.
script -qec "'$CLI' --api 127.0.0.1:$HTTP load /data/esc --metadata-only" /dev/null \
	>"$CIS_TMP/tty-load.out" 2>&1 || true
assert_contains "$(cat "$CIS_TMP/tty-load.out")" "] 2/2 files" "load's bar on a terminal"
grep -qF 'x1b[K' "$CIS_TMP/tty-load.out" &&
	fail "load's bar showed its erase-line sequence as text: $(head -c 300 "$CIS_TMP/tty-load.out")"

kill "$MPID"
wait "$MPID" 2>/dev/null || true
log "test_cli: ok"
