"""What an image brings to its containers, for ``kubectl exec``: the programs the exec shell may
run, the image's files, environment, user, working directory and default command.

Three families: the apps' runtime image (``python:3.11-slim`` with the service's artifact at
``/app``, as ``kube/Dockerfile`` builds it), the datastores' stock images (``redis:7.2-alpine``
…), and the well-known utility images (busybox, alpine, curlimages/curl, nicolaka/netshoot,
nginx) that the kubelet starts although no artifact was built for them (:func:`utility_image`;
any other image nobody built keeps failing to pull). The programs follow the real images:
busybox has ``wget`` and ``nc`` but no ``curl``; a Debian slim image has neither (nor ``ps``):
debug with a busybox pod, as on a real cluster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

from ..runtime.code import Artifact

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_COMMON = frozenset({"[", "base64", "basename", "cat", "cut", "date", "dirname", "echo", "egrep", "env", "false",
                     "gzip", "gunzip", "zcat",  # busybox applets; Debian's essential gzip package
                     "fgrep", "grep", "head", "hostname", "id", "kill", "ls", "printenv", "printf", "pwd", "seq", "sh",
                     "sleep", "sort", "tail", "tee", "test", "tr", "true", "uname", "uniq", "wc", "which", "whoami"})
BUSYBOX = _COMMON | {"ash", "nc", "nslookup", "ps", "uptime", "wget"}
ALPINE = BUSYBOX | {"getent"}  # musl-utils
DEBIAN = _COMMON | {"getent"}  # a slim Debian: no ps or uptime (procps), wget, curl, nc or nslookup

_BUSYBOX_PASSWD = """root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
bin:x:2:2:bin:/bin:/bin/false
sys:x:3:3:sys:/dev:/bin/false
sync:x:4:100:sync:/bin:/bin/sync
mail:x:8:8:mail:/var/spool/mail:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
operator:x:37:37:Operator:/var:/bin/false
nobody:x:65534:65534:nobody:/home:/bin/false
"""
_BUSYBOX_GROUP = """root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
wheel:x:10:root
mail:x:12:
www-data:x:33:
users:x:100:
nogroup:x:65534:
"""
_ALPINE_PASSWD = """root:x:0:0:root:/root:/bin/sh
bin:x:1:1:bin:/bin:/sbin/nologin
daemon:x:2:2:daemon:/sbin:/sbin/nologin
lp:x:4:7:lp:/var/spool/lpd:/sbin/nologin
sync:x:5:0:sync:/sbin:/bin/sync
shutdown:x:6:0:shutdown:/sbin:/sbin/shutdown
halt:x:7:0:halt:/sbin:/sbin/halt
mail:x:8:12:mail:/var/mail:/sbin/nologin
news:x:9:13:news:/usr/lib/news:/sbin/nologin
uucp:x:10:14:uucp:/var/spool/uucppublic:/sbin/nologin
cron:x:16:16:cron:/var/spool/cron:/sbin/nologin
ftp:x:21:21::/var/lib/ftp:/sbin/nologin
sshd:x:22:22:sshd:/dev/null:/sbin/nologin
games:x:35:35:games:/usr/games:/sbin/nologin
ntp:x:123:123:NTP:/var/empty:/sbin/nologin
guest:x:405:100:guest:/dev/null:/sbin/nologin
nobody:x:65534:65534:nobody:/:/sbin/nologin
"""
_ALPINE_GROUP = """root:x:0:root
bin:x:1:root,bin,daemon
daemon:x:2:root,bin,daemon
sys:x:3:root,bin
adm:x:4:root,daemon
tty:x:5:
disk:x:6:root
wheel:x:10:root
mail:x:12:mail
users:x:100:games
nogroup:x:65533:
nobody:x:65534:
"""
_DEBIAN_PASSWD = """root:x:0:0:root:/root:/bin/bash
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
bin:x:2:2:bin:/bin:/usr/sbin/nologin
sys:x:3:3:sys:/dev:/usr/sbin/nologin
sync:x:4:65534:sync:/bin:/bin/sync
games:x:5:60:games:/usr/games:/usr/sbin/nologin
man:x:6:12:man:/var/cache/man:/usr/sbin/nologin
lp:x:7:7:lp:/var/spool/lpd:/usr/sbin/nologin
mail:x:8:8:mail:/var/mail:/usr/sbin/nologin
news:x:9:9:news:/var/spool/news:/usr/sbin/nologin
uucp:x:10:10:uucp:/var/spool/uucp:/usr/sbin/nologin
proxy:x:13:13:proxy:/bin:/usr/sbin/nologin
www-data:x:33:33:www-data:/var/www:/usr/sbin/nologin
backup:x:34:34:backup:/var/backups:/usr/sbin/nologin
list:x:38:38:Mailing List Manager:/var/list:/usr/sbin/nologin
irc:x:39:39:ircd:/run/ircd:/usr/sbin/nologin
_apt:x:42:65534::/nonexistent:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
"""
_DEBIAN_GROUP = """root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
mail:x:8:
www-data:x:33:
staff:x:50:
users:x:100:
nogroup:x:65534:
"""
_ALPINE_RELEASE = """NAME="Alpine Linux"
ID=alpine
VERSION_ID=3.20.3
PRETTY_NAME="Alpine Linux v3.20"
HOME_URL="https://alpinelinux.org/"
BUG_REPORT_URL="https://gitlab.alpinelinux.org/alpine/aports/-/issues"
"""
_DEBIAN_RELEASE = """PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
VERSION="12 (bookworm)"
VERSION_CODENAME=bookworm
ID=debian
HOME_URL="https://www.debian.org/"
SUPPORT_URL="https://www.debian.org/support"
BUG_REPORT_URL="https://bugs.debian.org/"
"""
_DEBIAN_ALIASES = (("bash", "sh"), ("dash", "sh"))  # the exec shell plays them as ash

NGINX_VERSION = "1.27.3"
NGINX_INDEX = b"""<!DOCTYPE html>
<html>
<head>
<title>Welcome to nginx!</title>
<style>
html { color-scheme: light dark; }
body { width: 35em; margin: 0 auto;
font-family: Tahoma, Verdana, Arial, sans-serif; }
</style>
</head>
<body>
<h1>Welcome to nginx!</h1>
<p>If you see this page, the nginx web server is successfully installed and
working. Further configuration is required.</p>

<p>For online documentation and support please refer to
<a href="http://nginx.org/">nginx.org</a>.<br/>
Commercial support is available at
<a href="http://nginx.com/">nginx.com</a>.</p>

<p><em>Thank you for using nginx.</em></p>
</body>
</html>
"""
_NGINX_DEFAULT_CONF = """server {
    listen       80;
    listen  [::]:80;
    server_name  localhost;

    location / {
        root   /usr/share/nginx/html;
        index  index.html index.htm;
    }

    error_page   500 502 503 504  /50x.html;
    location = /50x.html {
        root   /usr/share/nginx/html;
    }
}
"""


@dataclass(frozen=True)
class Image:
    """What one image brings. ``commands`` None: every program the exec shell knows.
    ``entrypoint``/``cmd`` as in the image config (the pod's ``command``/``args`` replace them);
    ``listens``: the ports its main process serves (``server``: which server it is)."""

    name: str
    commands: Optional[frozenset[str]]
    passwd: str
    group: str
    os_release: str = ""
    env: tuple[tuple[str, str], ...] = (("PATH", PATH),)
    files: tuple[tuple[str, bytes], ...] = ()
    dirs: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    uid: int = 0
    workdir: str = "/"
    aliases: tuple[tuple[str, str], ...] = ()
    listens: tuple[int, ...] = ()
    server: str = ""  # "nginx": the main process is that server (when the command is left as the image's)
    utility: bool = False  # started by the kubelet without a built artifact


def _base(tag: str, default: str) -> str:
    return "alpine" if "alpine" in tag else default


def _files(base: str, extra: tuple[tuple[str, bytes], ...] = ()) -> tuple[tuple[str, bytes], ...]:
    release = {"alpine": _ALPINE_RELEASE, "debian": _DEBIAN_RELEASE}.get(base, "")
    return ((("/etc/os-release", release.encode()),) if release else ()) + extra


def _accounts(base: str, extra_user: str = "", extra_group: str = "") -> tuple[str, str]:
    passwd, group = {"alpine": (_ALPINE_PASSWD, _ALPINE_GROUP), "debian": (_DEBIAN_PASSWD, _DEBIAN_GROUP)}.get(
        base, (_BUSYBOX_PASSWD, _BUSYBOX_GROUP))
    return passwd + extra_user, group + extra_group


def repository(ref: str) -> tuple[str, str]:
    """``docker.io/library/busybox:1.36@sha256:…`` -> (``busybox``, ``1.36``)."""
    name = ref.split("@", 1)[0].strip()
    tag = ""
    if ":" in name.rsplit("/", 1)[-1]:
        name, tag = name.rsplit(":", 1)
    for prefix in ("docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        if name.startswith(prefix):
            name = name[len(prefix):]
    if name.startswith("library/"):
        name = name[len("library/"):]
    return name.lower(), tag


UTILITY_IMAGES = ("busybox", "alpine", "curlimages/curl", "nicolaka/netshoot", "nginx")


def utility_image(ref: str) -> Optional[Image]:
    """The utility image ``ref`` names, any tag or digest (None: not one the runtime knows)."""
    name, tag = repository(ref)
    if name == "busybox":
        passwd, group = _accounts("busybox")
        return Image("busybox", BUSYBOX, passwd, group, cmd=("sh",), utility=True)
    if name == "alpine":
        passwd, group = _accounts("alpine")
        return Image("alpine", ALPINE, passwd, group, _ALPINE_RELEASE, files=_files("alpine"), cmd=("/bin/sh",),
                     utility=True)
    if name == "curlimages/curl":
        passwd, group = _accounts("alpine", "curl_user:x:100:101:Linux User,,,:/home/curl_user:/sbin/nologin\n",
                                  "curl_group:x:101:curl_user\n")
        return Image("curlimages/curl", ALPINE | {"curl"}, passwd, group, _ALPINE_RELEASE,
                     env=(("PATH", PATH), ("CURL_CA_BUNDLE", "/cacert.pem")), files=_files("alpine"),
                     dirs=("/home/curl_user",), entrypoint=("/entrypoint.sh",), cmd=("curl",), uid=100,
                     workdir="/home/curl_user", utility=True)
    if name == "nicolaka/netshoot":
        passwd, group = _accounts("alpine")
        return Image("nicolaka/netshoot", None, passwd, group, _ALPINE_RELEASE, files=_files("alpine"), cmd=("zsh",),
                     workdir="/root", aliases=(("bash", "sh"), ("zsh", "sh")), utility=True)
    if name == "nginx":
        base = _base(tag, "debian")
        passwd, group = _accounts(base, "nginx:x:101:101:nginx user:/nonexistent:/bin/false\n" if base == "debian"
                                  else "nginx:x:101:101:nginx:/var/cache/nginx:/sbin/nologin\n", "nginx:x:101:\n")
        commands = (DEBIAN if base == "debian" else ALPINE) | {"curl"}
        files = _files(base, (("/usr/share/nginx/html/index.html", NGINX_INDEX),
                              ("/etc/nginx/conf.d/default.conf", _NGINX_DEFAULT_CONF.encode())))
        return Image("nginx", commands, passwd, group, files=files, dirs=("/var/cache/nginx", "/var/log/nginx"),
                     env=(("PATH", PATH), ("NGINX_VERSION", NGINX_VERSION), ("NJS_VERSION", "0.8.7"),
                          ("NJS_RELEASE", "1~bookworm"), ("PKG_RELEASE", "1~bookworm"),
                          ("DYNPKG_RELEASE", "1~bookworm")),
                     entrypoint=("/docker-entrypoint.sh",), cmd=("nginx", "-g", "daemon off;"),
                     aliases=_DEBIAN_ALIASES if base == "debian" else (), listens=(80,), server="nginx",
                     utility=True)
    return None


_DATASTORES = {  # image name -> (port, process, user, uid)
    "redis": (6379, "redis-server *:6379", "redis", 999),
    "mongo": (27017, "mongod --bind_ip_all", "mongodb", 999),
    "memcached": (11211, "memcached", "memcache", 11211),
    "postgres": (5432, "postgres", "postgres", 999),
    "mysql": (3306, "mysqld", "mysql", 999),
}


def datastore_image(ref: str) -> Image:
    """A datastore's stock image (what its pod shows; the twin serves it from DATASTORE_SOURCE)."""
    name, tag = repository(ref)
    port, _, user, uid = _DATASTORES.get(name, (6379, "", name, 999))
    base = _base(tag, "debian")
    passwd, group = _accounts(base, f"{user}:x:{uid}:{uid}::/home/{user}:/sbin/nologin\n", f"{user}:x:{uid}:\n")
    return Image(name, ALPINE if base == "alpine" else DEBIAN, passwd, group, files=_files(base), dirs=("/data",),
                 uid=uid, workdir="/data", listens=(port,), aliases=_DEBIAN_ALIASES if base == "debian" else ())


def datastore_process(ref: str) -> str:
    return _DATASTORES.get(repository(ref)[0], (0, "datastore", "", 0))[1]


def runtime_image(artifact: Artifact) -> Image:
    """A service's image as the pipeline builds it for a real cluster (``kube/Dockerfile``):
    python:3.11-slim, the artifact at ``/app``, user 65532, the runtime on :8080."""
    manifest = json.dumps({"format": 1, "app": artifact.app, "service": artifact.service, "digest": artifact.digest,
                           "entry": artifact.entry, "files": sorted(artifact.files)}, indent=1) + "\n"
    files = tuple((f"/app/{path}", text.encode()) for path, text in sorted(artifact.files.items()))
    passwd, group = _accounts("debian")
    return Image(
        f"{artifact.app}/{artifact.service}", DEBIAN, passwd, group, _DEBIAN_RELEASE,
        env=(("PATH", "/usr/local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
             ("LANG", "C.UTF-8"), ("GPG_KEY", "A035C8C19219BA821ECEA86B64E628F8D684696D"),
             ("PYTHON_VERSION", "3.11.11"), ("PYTHONDONTWRITEBYTECODE", "1"), ("PYTHONUNBUFFERED", "1"),
             ("PIP_DISABLE_PIP_VERSION_CHECK", "1"), ("PYTHONPATH", "/opt/sremarathon"), ("PORT", "8080"),
             ("SREMARATHON_APP", artifact.app), ("SREMARATHON_SERVICE", artifact.service)),
        files=_files("debian", files + (("/app/artifact.json", manifest.encode()),)),
        dirs=("/opt/sremarathon/pytest_sremarathon",),
        entrypoint=("python", "-m", "pytest_sremarathon.runtime"), uid=65532, workdir="/app",
        aliases=_DEBIAN_ALIASES, listens=(8080,))
