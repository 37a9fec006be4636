"""The exec shell, command by command: output, stderr and exit codes as busybox gives them."""

from __future__ import annotations

from typing import Optional

import pytest
from support.exec_fixtures import make_container

from pytest_sremarathon.exec import ExecNotFound, HttpRequest, HttpResponse, StaticContainer, run_exec
from pytest_sremarathon.exec.shell import BufIn, BufOut


def run(view: StaticContainer, script: Optional[str] = None, *argv: str, stdin: bytes = b"",
        tty: bool = False) -> tuple[int, str, str]:
    out, err = BufOut(), BufOut()
    args = list(argv) if script is None else ["sh", "-c", script, *argv]
    code = run_exec(view, args, BufIn(stdin), out, err, tty=tty)
    return code, out.data.decode(), err.data.decode()


def sh(script: str, **kw: object) -> tuple[int, str, str]:
    return run(make_container(**kw), script)  # type: ignore[arg-type]


# -- the language -------------------------------------------------------------------------------
@pytest.mark.parametrize("script, code, out", [
    ("echo a | tr a b", 0, "b\n"),
    ("true && echo yes", 0, "yes\n"),
    ("false && echo yes", 1, ""),
    ("false || echo no", 0, "no\n"),
    ("echo one; echo two", 0, "one\ntwo\n"),
    ("echo 'single $HOME' \"double $HOME\" back\\ slash", 0, "single $HOME double /root back slash\n"),
    ("X=1; echo $X ${X} ${UNSET:-dflt} ${#LOG_LEVEL}", 0, "1 1 dflt 5\n"),
    ("echo \"$(hostname)\" `echo tick`", 0, "cart-7d9f8b-x2x tick\n"),
    ("echo $((2 + 3 * 4)) $((7 / 2)) $((7 % 3))", 0, "14 3 1\n"),
    ("false; echo $?", 0, "1\n"),
    ("echo hi >/dev/null; echo gone 2>/dev/null", 0, "gone\n"),
    ("echo err >&2 2>/dev/null", 0, ""),
    ("ls /nope 2>&1 | wc -l", 0, "1\n"),
    ("for i in 1 2 3; do echo n$i; done", 0, "n1\nn2\nn3\n"),
    ("i=0; while [ $i -lt 3 ]; do i=$((i+1)); done; echo $i", 0, "3\n"),
    ("if [ -f /etc/config/app.yaml ]; then echo file; else echo none; fi", 0, "file\n"),
    ("if test -d /nope; then echo d; elif [ x = x ]; then echo elif; fi", 0, "elif\n"),
    ("! false && echo negated", 0, "negated\n"),
    ("{ echo a; echo b; } | wc -l", 0, "2\n"),
    ("(cd /etc; pwd); pwd", 0, "/etc\n/\n"),
    ("A=x env | grep ^A=", 0, "A=x\n"),
    ("export NEW=v; printenv NEW", 0, "v\n"),
    ("cat /etc/config/*.yaml | head -1", 0, "port: 8080\n"),
    ("echo /etc/config/*", 0, "/etc/config/app.yaml /etc/config/features.json\n"),
    ("echo '/etc/config/*'", 0, "/etc/config/*\n"),
    ("printf '%s=%d\\n' a 1 b 2", 0, "a=1\nb=2\n"),
    ("echo -n x; echo -e 'a\\tb'", 0, "xa\tb\n"),
    ("set -- p q; echo $# $1 \"$@\"", 0, "2 p p q\n"),
    ("exit 3", 3, ""),
    ("exit 300", 44, ""),
    ("sh -c 'exit 5'; echo inner=$?", 0, "inner=5\n"),
    ("echo x; exit 2; echo never", 2, "x\n"),
    ("echo hi > /tmp/f; echo again >> /tmp/f; cat /tmp/f", 0, "hi\nagain\n"),
    ("# just a comment", 0, ""),
])
def test_language(script: str, code: int, out: str) -> None:
    assert sh(script)[:2] == (code, out)


@pytest.mark.parametrize("script, code, err", [
    ("nosuchcmd --flag", 127, "sh: nosuchcmd: not found\n"),
    ("/usr/bin/nosuch", 127, "sh: /usr/bin/nosuch: not found\n"),
    ("/etc/config/app.yaml", 126, "sh: /etc/config/app.yaml: Permission denied\n"),
    ("echo x > /etc/config/app.yaml", 1, "sh: can't create /etc/config/app.yaml: Read-only file system\n"),
    ("echo x > /nodir/f", 1, "sh: can't create /nodir/f: nonexistent directory\n"),
    ("if true; then echo", 2, "sh: syntax error: unexpected end of file\n"),
    ("echo a; fi", 2, 'sh: syntax error: unexpected "fi"\n'),
    ("echo 'open", 2, "sh: syntax error: unterminated quoted string\n"),
    ("exit abc", 2, "sh: exit: Illegal number: abc\n"),
    ("[ 1 -eq ]", 2, "sh: [: 1: unknown operand\n"),
    ("[ 1 -eq x ]", 2, "sh: [: x: bad number\n"),
    ("cd /nope", 2, "sh: cd: can't cd to /nope: No such file or directory\n"),
])
def test_errors(script: str, code: int, err: str) -> None:
    got = sh(script)
    assert (got[0], got[2]) == (code, err)


def test_set_e_stops_at_the_first_failure() -> None:
    assert sh("set -e; echo a; false; echo b")[:2] == (1, "a\n")
    assert sh("set -e; false || echo ok; if false; then :; fi; echo end")[:2] == (0, "ok\nend\n")


def test_commands_missing_from_the_image_are_not_found() -> None:
    view = make_container(commands=frozenset({"sh", "cat"}))
    assert run(view, "cat /etc/config/features.json; curl http://cart.shop:8080/") == \
        (127, '{"beta": false}\n', "sh: curl: not found\n")
    # builtins stay: they are the shell's own
    assert run(view, "echo x; [ -n x ] && true")[:2] == (0, "x\n")


# -- running a program without a shell ----------------------------------------------------------
def test_direct_exec_and_runtime_errors() -> None:
    view = make_container()
    assert run(view, None, "printenv", "LOG_LEVEL") == (0, "debug\n", "")
    with pytest.raises(ExecNotFound, match=r'exec: "bash": executable file not found in \$PATH: unknown'):
        run(view, None, "bash")
    with pytest.raises(ExecNotFound, match=r'stat /opt/app/run: no such file or directory'):
        run(view, None, "/opt/app/run")
    with pytest.raises(ExecNotFound, match=r'failed to start exec "[0-9a-f]{64}"'):
        run(make_container(commands=frozenset()), None, "sh")


def test_interactive_stdin_runs_lines_until_exit() -> None:
    view = make_container()
    assert run(view, None, "sh", stdin=b"echo one\nif true; then\necho two\nfi\nexit 4\necho never\n") == \
        (4, "one\ntwo\n", "")
    assert run(view, None, "sh", stdin=b"false\n")[0] == 1  # end of input: the last status


def test_interactive_tty_prompts_and_echoes() -> None:
    code, out, _ = run(make_container(), None, "sh", stdin=b"echo hi\rcd /etc\rpwdx\x7f\rexit 2\r", tty=True)
    assert code == 2
    assert out == "/ # echo hi\nhi\n/ # cd /etc\n/etc # pwdx\b \b\n/etc\n/etc # exit 2\n"


# -- the system applets ----------------------------------------------------------------------------
def test_env_printenv_hostname_id_uname() -> None:
    code, out, _ = sh("env")
    assert code == 0 and out.splitlines()[0].startswith("PATH=") and "DB_URL=postgres://orders-db:5432/orders" in out
    assert sh("printenv NOPE")[0] == 1
    assert sh("hostname; hostname -i")[1] == "cart-7d9f8b-x2x\n10.244.0.7\n"
    assert sh("id; whoami")[1] == "uid=0(root) gid=0(root) groups=0(root)\nroot\n"
    assert sh("id", uid=1000)[1] == "uid=1000(app) gid=1000(app) groups=1000(app)\n"
    assert sh("whoami", uid=4242)[:3] == (1, "", "whoami: unknown uid 4242\n")
    assert sh("uname; uname -a")[1] == "Linux\nLinux cart-7d9f8b-x2x 5.15.0 #1 SMP x86_64 GNU/Linux\n"


def test_ps_lists_the_container_and_itself() -> None:
    assert sh("ps")[1] == ("PID   USER     TIME  COMMAND\n"
                           "    1 root      0:00 python -m cart --port 8080\n"
                           "    7 root      0:00 sh\n"
                           "    8 root      0:00 ps\n")


def test_date_and_sleep_use_virtual_time() -> None:
    assert sh("date; sleep 90; date -u; date +%s; sleep 1m; date -Iseconds")[1] == (
        "Fri May 17 12:30:05 UTC 2024\nFri May 17 12:31:35 UTC 2024\n1715949095\n2024-05-17T12:32:35+00:00\n")
    assert sh("sleep abc") == (1, "", "sleep: invalid number 'abc'\n")


# -- files and text --------------------------------------------------------------------------------
def test_cat_ls_head_tail() -> None:
    assert sh("cat /etc/secret/password") == (0, "hunter2", "")
    assert sh("cat /nope") == (1, "", "cat: can't open '/nope': No such file or directory\n")
    assert sh("cat /etc") == (1, "", "cat: read error: Is a directory\n")
    assert sh("ls /etc/config") == (0, "app.yaml\nfeatures.json\n", "")
    assert sh("ls /nope") == (1, "", "ls: /nope: No such file or directory\n")
    assert sh("ls -l /etc/config/app.yaml")[1] == \
        "-rw-r--r--    1 root     root            44 May 17 12:30 /etc/config/app.yaml\n"
    assert sh("ls /etc/secret /etc/config")[1] == "/etc/config:\napp.yaml\nfeatures.json\n\n/etc/secret:\npassword\n"
    assert sh("ls -a /etc/secret")[1] == ".\n..\npassword\n"
    assert sh("head -n 1 /etc/config/app.yaml; tail -1 /etc/config/app.yaml")[1] == "port: 8080\ntimeout_ms: 250\n"
    assert sh("seq 10 | tail -n +9; seq 5 | head -2")[1] == "9\n10\n1\n2\n"


def test_grep() -> None:
    assert sh("grep port /etc/config/app.yaml") == (0, "port: 8080\n", "")
    assert sh("grep -i PORT /etc/config/app.yaml")[1] == "port: 8080\n"
    assert sh("grep -v port /etc/config/app.yaml | wc -l")[1] == "2\n"
    assert sh("grep -n 'level' /etc/config/app.yaml")[1] == "2:log_level: debug\n"
    assert sh("grep -c o /etc/config/app.yaml")[1] == "3\n"
    assert sh("grep -E 'port|timeout' /etc/config/app.yaml | wc -l")[1] == "2\n"
    assert sh("grep 'port\\|timeout' /etc/config/app.yaml | wc -l")[1] == "2\n"  # BRE alternation
    assert sh("grep -o '[0-9]\\+' /etc/config/app.yaml")[1] == "8080\n250\n"
    assert sh("grep -q debug /etc/config/app.yaml")[:2] == (0, "")
    assert sh("grep nothing /etc/config/app.yaml") == (1, "", "")
    assert sh("grep x /nope") == (2, "", "grep: can't open '/nope': No such file or directory\n")
    assert sh("grep -l beta /etc/config/*")[1] == "/etc/config/features.json\n"
    assert sh("env | grep -F LOG_")[1] == "LOG_LEVEL=debug\n"


def test_wc_sort_uniq_cut_base64() -> None:
    assert sh("wc -l /etc/config/app.yaml")[1] == "3 /etc/config/app.yaml\n"
    assert sh("printf 'a b\\nc\\n' | wc")[1] == "        2         3         6\n"
    assert sh("printf 'b\\na\\nb\\n' | sort | uniq -c")[1] == "      1 a\n      2 b\n"
    assert sh("printf '10\\n9\\n' | sort -n")[1] == "9\n10\n"
    assert sh("echo $DB_URL | cut -d/ -f3")[1] == "orders-db:5432\n"
    assert sh("echo aGkK | base64 -d; echo hi | base64")[1] == "hi\naGkK\n"


# -- the network -----------------------------------------------------------------------------------
@pytest.mark.parametrize("script, code, out, err", [
    ("curl -s http://cart.shop:8080/healthz", 0, "ok\n", ""),
    ("curl -s cart:8080/healthz", 0, "ok\n", ""),
    ("curl -s -o /dev/null -w '%{http_code}' http://cart.shop:8080/fail", 0, "503", ""),
    ("curl -sf http://cart.shop:8080/fail", 22, "", ""),
    ("curl -sSf http://cart.shop:8080/fail", 22, "", "curl: (22) The requested URL returned error: 503\n"),
    ("curl -s http://cart.shop:8080/fail", 0, '{"error":"unavailable"}\n', ""),
    ("curl -sS http://nosuch.shop/", 6, "", "curl: (6) Could not resolve host: nosuch.shop\n"),
    ("curl -s http://nosuch.shop/; echo $?", 0, "6\n", ""),
    ("curl -sS http://down.shop:8080/", 7, "",
     "curl: (7) Failed to connect to down.shop port 8080 after 1 ms: Couldn't connect to server\n"),
    ("curl -sS -m 2 http://blackhole.shop:8080/", 28, "",
     "curl: (28) Failed to connect to blackhole.shop port 8080 after 2000 ms: Timeout was reached\n"),
    ("curl -sS -m 1 http://slow.shop:8080/", 28, "",
     "curl: (28) Operation timed out after 1000 milliseconds with 0 bytes received\n"),
    ("curl -sS http://reset.shop:8080/", 56, "", "curl: (56) Recv failure: Connection reset by peer\n"),
    ("curl -s -w '%{http_code}\\n' -o /dev/null http://down.shop:8080/", 7, "000\n", ""),
    ("curl -s -X POST -H 'X-Test: yes' -d 'a=1' http://cart.shop:8080/echo", 0, "POST /echo yes a=1\n", ""),
    ("curl -sI http://cart.shop:8080/healthz", 0,
     "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\ncontent-length: 3\r\n\r\n", ""),
    ("curl -si http://cart.shop:8080/healthz | tail -1", 0, "ok\n", ""),
    ("curl -sL http://cart.shop:8080/redirect", 0, "ok\n", ""),
    ("curl -s http://cart.shop:8080/healthz -o /tmp/h; cat /tmp/h", 0, "ok\n", ""),
    ("curl --silent --fail --max-time 5 http://cart.shop:8080/healthz", 0, "ok\n", ""),
    ("wget -qO- http://cart.shop:8080/healthz", 0, "ok\n", ""),
    ("wget -q -O - http://cart.shop:8080/fail", 1, "", "wget: server returned error: HTTP/1.1 503 Service Unavailable\n"),
    ("wget -qO- http://nosuch.shop/", 1, "", "wget: bad address 'nosuch.shop'\n"),
    ("wget -qO- http://down.shop:8080/", 1, "", "wget: can't connect to remote host (10.96.0.8): Connection refused\n"),
    ("wget -q -T 2 -O- http://blackhole.shop:8080/", 1, "", "wget: download timed out\n"),
    ("wget -q --spider http://cart.shop:8080/healthz", 0, "", ""),
    ("wget -O- http://cart.shop:8080/healthz", 0, "ok\n",
     "Connecting to cart.shop:8080 (10.96.0.5:8080)\nwriting to stdout\n"
     "-                    100% |********************************|     3  0:00:00 ETA\nwritten to stdout\n"),
    ("wget -q http://cart.shop:8080/healthz && cat healthz", 0, "ok\n", ""),
    ("nslookup cart.shop", 0, "Server:\t\t10.96.0.10\nAddress:\t10.96.0.10:53\n\nName:\tcart.shop\nAddress: 10.96.0.5\n\n", ""),
    ("nslookup nosuch.shop", 1,
     "Server:\t\t10.96.0.10\nAddress:\t10.96.0.10:53\n\n** server can't find nosuch.shop: NXDOMAIN\n\n", ""),
    ("getent hosts cart.shop", 0, "10.96.0.5       cart.shop\n", ""),
    ("getent hosts nosuch.shop", 2, "", ""),
    ("nc -z cart.shop 8080", 0, "", ""),
    ("nc -zv cart.shop 8080", 0, "", "cart.shop (10.96.0.5:8080) open\n"),
    ("nc -z cart.shop 9999", 1, "", ""),
    ("nc -zv -w 2 blackhole.shop 80", 1, "", "nc: blackhole.shop (10.96.0.7:80): Connection timed out\n"),
    ("nc -z nosuch.shop 80", 1, "", "nc: bad address 'nosuch.shop'\n"),
])
def test_network(script: str, code: int, out: str, err: str) -> None:
    assert sh(script) == (code, out, err)


def test_curl_progress_meter_and_verbose() -> None:
    code, out, err = sh("curl http://cart.shop:8080/healthz")
    assert code == 0 and out == "ok\n" and err.startswith("  % Total    % Received") and "100     3" in err
    code, out, err = sh("curl -sv http://cart.shop:8080/healthz")
    assert "> GET /healthz HTTP/1.1" in err and "> Host: cart.shop:8080" in err and "< HTTP/1.1 200 OK" in err
    assert "*   Trying 10.96.0.5:8080..." in err


def test_dns_outage() -> None:
    view = make_container(dns_down=True)
    assert run(view, "nslookup cart.shop") == (1, ";; connection timed out; no servers could be reached\n\n", "")
    assert run(view, "curl -sS http://cart.shop:8080/")[0] == 6
    # an address needs no DNS
    assert run(view, "curl -s http://10.96.0.5:8080/healthz")[:2] == (0, "ok\n")


def test_latency_advances_the_shell_clock() -> None:
    assert sh("date +%s; curl -s slow.shop:8080 >/dev/null; date +%s")[1] == "1715949005\n1715949008\n"


def test_the_view_sees_the_requests() -> None:
    seen: list[HttpRequest] = []

    def handler(request: HttpRequest) -> HttpResponse:
        seen.append(request)
        return HttpResponse(200, b"")

    run(make_container(http_handler=handler), "curl -s -m 3 http://cart.shop:8080/a?b=1; wget -q -O- cart:8080/x")
    assert [(r.method, r.url, r.timeout) for r in seen] == [
        ("GET", "http://cart.shop:8080/a?b=1", 3.0), ("GET", "http://cart:8080/x", None)]
    assert dict(seen[0].headers)["User-Agent"].startswith("curl/")


def test_runaway_loops_are_killed() -> None:
    code, out, err = sh("while true; do sleep 1; done; echo after")
    assert code == 137 and out == "" and "runaway loop" in err
    assert sh("i=0; while :; do i=$((i+1)); done")[0] == 137


def test_deterministic() -> None:
    script = "ps; date; curl -s slow.shop:8080; ls -la /etc; env; sleep 3; date"
    assert sh(script) == sh(script)


def test_gzip_round_trips_and_is_deterministic() -> None:
    """The Python client's own e2e suite pipes ``echo -n … | gzip`` and gunzips the bytes."""
    import gzip as gz

    out, err = BufOut(), BufOut()
    assert run_exec(make_container(), ["sh", "-c", 'echo -n "This is a test string" | gzip'], BufIn(b""), out,
                    err) == 0
    assert gz.decompress(out.data) == b"This is a test string" and out.data[4:8] == b"\0\0\0\0"  # mtime 0
    assert sh("echo hello | gzip | zcat")[1] == "hello\n"
    assert sh("echo hi | gzip -c | gunzip -c")[1] == "hi\n"
    code, _, e = sh("echo plain | gunzip")
    assert code == 1 and "invalid magic" in e


def test_uptime_prints_busybox_s_line() -> None:
    code, out, _ = sh("uptime")
    assert code == 0 and len(out.splitlines()) == 1 and " up " in out and "load average: " in out
