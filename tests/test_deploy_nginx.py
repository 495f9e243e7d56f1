"""The deployment recipe, run for real: Debian's nginx with deploy/nginx-proxima.conf and a self-signed
certificate in front of a real ``proxima serve`` (gunicorn, RQ worker, embedded Redis). Through the
proxy: the https rater flow, Secure/HttpOnly/SameSite cookies, HSTS, plain http redirected, and rate
limits that count the rater's address (from X-Forwarded-For), not the proxy's."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import requests
from helpers import Serve, require, wait_for
from requests.adapters import HTTPAdapter

from webapp.cli.embedded import free_port

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "deploy" / "nginx-proxima.conf"
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
HOST = "study.example.org"
# nginx's main config around the site file (Debian's /etc/nginx/nginx.conf does the same with an include)
MAIN = """pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
worker_processes 1;
events {{ worker_connections 64; }}
http {{
    access_log {tmp}/access.log;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    include {tmp}/site.conf;
}}
"""


@pytest.fixture(autouse=True)
def _nginx_and_openssl():
    require(NGINX is not None, "Debian's nginx", "apt-get install nginx (.ci/run installs it)")
    require(shutil.which("openssl") is not None, "openssl", "apt-get install openssl (.ci/run installs it)")


class FromAddress(HTTPAdapter):
    """Connect from a given loopback address (127.0.0.0/8 is all ours), as a rater elsewhere would."""

    def __init__(self, address: str):
        self.address = address
        super().__init__()

    def init_poolmanager(self, *args, **kwargs):
        kwargs["source_address"] = (self.address, 0)
        super().init_poolmanager(*args, **kwargs)


def rater_from(address: str, ca: Path) -> requests.Session:
    session = requests.Session()
    session.mount("https://", FromAddress(address))
    session.mount("http://", FromAddress(address))
    session.verify = str(ca)
    session.trust_env = False  # no proxy or CA bundle from the environment: this CA, straight to nginx
    return session


def self_signed(tmp: Path) -> tuple[Path, Path]:
    key, cert = tmp / "key.pem", tmp / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", str(key),
                    "-out", str(cert), "-subj", f"/CN={HOST}", "-addext", f"subjectAltName=DNS:{HOST}"],
                   check=True, capture_output=True)
    return key, cert


def site_config(tmp: Path, https_port: int, http_port: int, app_port: int, key: Path, cert: Path) -> str:
    text = SITE.read_text()
    replaced = (text.replace("listen 443 ssl http2;", f"listen 127.0.0.1:{https_port} ssl;")
                .replace("listen [::]:443 ssl http2;", "")
                .replace("listen 80;", f"listen 127.0.0.1:{http_port};")
                .replace("listen [::]:80;", "")
                .replace("server 127.0.0.1:8000;", f"server 127.0.0.1:{app_port};")
                .replace(f"/etc/letsencrypt/live/{HOST}/fullchain.pem", str(cert))
                .replace(f"/etc/letsencrypt/live/{HOST}/privkey.pem", str(key)))
    assert replaced.count(str(tmp)) == 2 and str(app_port) in replaced  # the shipped file has these lines
    return replaced


@pytest.fixture
def deployed(tmp_path, monkeypatch):
    """(https base URL, CA file) of nginx in front of `proxima serve`, resolving HOST to 127.0.0.1."""
    https_port, http_port = free_port(), free_port()
    key, cert = self_signed(tmp_path)
    (tmp_path / "nginx.conf").write_text(MAIN.format(tmp=tmp_path))
    env = {"PROXIMA_TRUSTED_PROXIES": "1", "PROXIMA_SECRET_KEY": "deploy-test-secret",
           "PROXIMA_PUBLIC_URL": f"https://{HOST}:{https_port}", "PROXIMA_RATE_LIMIT_EXEMPT_ADDRESSES": None}
    # no REDIS_URL: serve's own embedded Redis, as on a single machine
    serve = Serve(tmp_path / "instance", "--host", "127.0.0.1", "--workers", "1", env=env)
    (tmp_path / "site.conf").write_text(site_config(tmp_path, https_port, http_port, serve.port, key, cert))
    nginx = subprocess.Popen([NGINX, "-e", str(tmp_path / "error.log"), "-p", str(tmp_path), "-c",
                              str(tmp_path / "nginx.conf"), "-g", "daemon off;"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # HOST -> 127.0.0.1 for this process, so certificate names and Host headers are the real ones
    import socket

    real = socket.getaddrinfo

    def resolve(host, *args, **kwargs):
        return real("127.0.0.1" if host == HOST else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    base = f"https://{HOST}:{https_port}"
    try:
        serve.wait_healthy(timeout=90)
        assert nginx.poll() is None, nginx.stdout.read() + (tmp_path / "error.log").read_text()
        wait_for(lambda: requests.get(f"{base}/api/health", verify=str(cert), timeout=2).ok, timeout=30,
                 what="nginx passing /api/health through")
        yield base, cert, f"http://{HOST}:{http_port}", tmp_path
    finally:
        nginx.send_signal(signal.SIGQUIT)
        serve.stop()
        try:
            nginx.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            nginx.kill()


def make_study(instance: Path, limits: str) -> None:
    from click.testing import CliRunner

    from webapp.cli import main

    (instance / "items.csv").write_text("id,text\n" + "".join(f"t{i},Text {i}\n" for i in range(6)))
    (instance / "study.yaml").write_text("name: Behind nginx\nalgorithm: random_triplets\nconsent: You agree.\n"
                                         f"limits: {limits}\n")
    result = CliRunner().invoke(main, ["create", str(instance / "study.yaml"), "--items", str(instance / "items.csv"),
                                       "--id", "tls"])
    assert result.exit_code == 0, result.output


def test_rater_flow_over_https_with_secure_cookies_hsts_and_the_raters_own_address(deployed, monkeypatch):
    base, ca, plain, tmp = deployed
    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(tmp / "instance"))
    monkeypatch.delenv("REDIS_URL", raising=False)
    make_study(tmp / "instance", "{max_questions_per_rater: 2, anonymous_sessions_per_address: 2}")

    # plain http is sent to https
    moved = rater_from("127.0.0.5", ca).get(f"{plain}/s/tls", allow_redirects=False, timeout=5)
    assert moved.status_code == 301 and moved.headers["Location"].startswith("https://")

    rater = rater_from("127.0.0.2", ca)
    page = rater.get(f"{base}/s/tls?PROLIFIC_PID=p-tls", timeout=10)
    assert page.status_code == 200 and "You agree." in page.text
    assert page.headers["Strict-Transport-Security"].startswith("max-age=")
    cookie = page.headers["Set-Cookie"]
    assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=Lax" in cookie, cookie
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    # a browser sends the page as Referer (the CSRF check insists on it over https)
    assert rater.post(f"{base}/s/tls/consent", data={"decision": "agree", "csrf_token": csrf}, timeout=10,
                      headers={"Referer": f"{base}/s/tls"}).ok
    for _ in range(2):
        question = rater.get(f"{base}/api/studies/tls/questions/next", timeout=10).json()["question"]
        answered = rater.post(f"{base}/api/studies/tls/answers", timeout=10,
                              json={"token": question["token"], "choice": question["candidates"][0]["handle"]})
        assert answered.status_code == 201, answered.text
    done = rater.get(f"{base}/s/tls/done", timeout=10)
    assert done.ok and 'id="completion-code"' in done.text

    # anonymous sessions are limited per address: two from 127.0.0.3, then it is refused ...
    for attempt in range(3):
        fresh = rater_from("127.0.0.3", ca)  # a new browser each time (no cookie)
        status = fresh.get(f"{base}/s/tls", timeout=10).status_code
        assert status == (200 if attempt < 2 else 429), (attempt, status)
    # ... while a rater at another address is not: the limit counted the rater, not nginx (127.0.0.1)
    assert rater_from("127.0.0.4", ca).get(f"{base}/s/tls", timeout=10).status_code == 200
    # a rater cannot pose as another address: nginx replaces any X-Forwarded-For it is sent
    spoof = rater_from("127.0.0.3", ca).get(f"{base}/s/tls", headers={"X-Forwarded-For": "198.51.100.9"}, timeout=10)
    assert spoof.status_code == 429
    # a long request line gets the JSON error shape, from gunicorn's worker (over 8,190 bytes) or nginx (16 kB)
    for length in (9000, 20000):
        long = rater.get(f"{base}/api/studies/tls/questions/next?pad=" + "x" * length, timeout=10)
        assert long.status_code == 414 and long.json()["error"]["code"] == "request_uri_too_long", long.text
