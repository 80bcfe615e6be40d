"""HTTPS sites: the gateway checks a site's certificate against its ``ca_file``.

A test CA from ``trustme`` signs a certificate for 127.0.0.1; the stand-in's app is
served with it by uvicorn on a loopback port. With the CA the gateway answers through
the site; without it (the system's CAs) or with another CA the site's certificate is
refused, so no request reaches it.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import trustme
import uvicorn

from tests.route.routeproc import free_port
from tests.route.test_gateway import gateway, served, site
from tierwise.errors import ScenarioError
from tierwise.lab.world.model_server import Behaviour, ModelServer
from tierwise.route.config import RouteConfig, load_route

pytestmark = pytest.mark.slow

HI = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


@pytest.fixture(scope="module")
def tls_site(tmp_path_factory: pytest.TempPathFactory):
    """(https URL of a stand-in with a test CA's certificate, that CA's PEM, another CA's)."""
    tmp = tmp_path_factory.mktemp("tls")
    ca, other = trustme.CA(), trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_and_cert_chain_pem.write_to_path(tmp / "server.pem")
    ca.cert_pem.write_to_path(tmp / "ca.pem")
    other.cert_pem.write_to_path(tmp / "other.pem")
    app = ModelServer("qwen3-8b", Behaviour(decode_step_s=0.001, prefill_s_per_token=0.0)).app
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="error",
        ssl_certfile=str(tmp / "server.pem"),
    )  # fmt: skip
    with served(app, port, config):
        yield f"https://127.0.0.1:{port}", tmp / "ca.pem", tmp / "other.pem"


def test_an_https_site_with_its_ca_file(tls_site, tmp_path: Path) -> None:
    url, ca, _ = tls_site
    router, port = gateway([{**site("cloud", url, "1 ms"), "ca_file": str(ca)}], tmp_path)
    with served(router.app, port) as gw:
        r = httpx.post(gw + "/v1/chat/completions", json=HI, timeout=10)
        assert r.status_code == 200 and r.headers["x-tierwise-site"] == "cloud"
        assert r.json()["choices"][0]["message"]["content"] == "w0 w1 w2 "
        stream = httpx.post(gw + "/v1/completions", json={"prompt": "x", "max_tokens": 2,
                                                          "stream": True}, timeout=10)  # fmt: skip
        assert stream.text.endswith("data: [DONE]\n\n")
        assert httpx.get(gw + "/v1/models").json()["data"][0]["id"] == "qwen3-8b"


@pytest.mark.parametrize("which", ["system", "other"])
def test_a_certificate_from_another_ca_is_refused(tls_site, tmp_path: Path, which: str) -> None:
    url, _, other = tls_site
    entry = site("cloud", url, "1 ms")
    if which == "other":
        entry["ca_file"] = str(other)
    router, port = gateway([entry], tmp_path)
    with served(router.app, port) as gw:
        r = httpx.post(gw + "/v1/chat/completions", json=HI, timeout=10)
    assert r.status_code == 503
    assert "connection error" in r.json()["error"]["message"]


def test_ca_file_errors_name_the_site(tmp_path: Path) -> None:
    cfg = RouteConfig.model_validate(
        {"site": [{**site("cloud", "https://127.0.0.1:1", "1 ms"), "ca_file": "/nonexistent"}]}
    )
    with pytest.raises(ScenarioError, match=r"site\.cloud\.ca_file"):
        cfg.site[0].tls()
    (tmp_path / "ca.pem").write_text("not a certificate")
    toml = tmp_path / "route.toml"
    toml.write_text(
        '[[site]]\nname = "cloud"\ntier = "cloud"\nurl = "https://127.0.0.1:1"\n'
        'decode_step = "1 ms"\nca_file = "ca.pem"\n'
    )
    loaded = load_route(toml).site[0]
    assert loaded.ca_file == str(tmp_path / "ca.pem")  # beside the config, not the cwd
    with pytest.raises(ScenarioError, match="cannot load CA file"):
        loaded.tls()
