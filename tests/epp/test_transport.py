"""Only Envoy reaches the EPP: a Unix socket, or mTLS with a client certificate required.

Both through a real Envoy (``--epp unix:/PATH``, ``--epp-tls-*``) and, for mTLS, with raw
gRPC clients that lack a certificate or hold one from another CA. Certificates are made
here with ``cryptography``.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.epp.conftest import TOKEN
from tests.epp.harness import EnvoyProcess, LoopThread, fleet_yaml
from tests.epp.http import post
from tests.epp.roundrobin import RoundRobinDecision
from tests.epp.upstream import Upstream
from trafficmgr.epp.decision import ClientIdentity
from trafficmgr.epp.envoy_config import EnvoyOptions, render
from trafficmgr.epp.server import ServerTls, start_server
from trafficmgr.fleetfile import load_fleet_text
from trafficmgr.routing.types import Fleet
from trafficmgr.testing.ports import free_port

pytestmark = pytest.mark.integration

AUTH = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
CHAT = {"model": "m1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _certificate(
    name: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
) -> x509.Certificate:
    """A CA (``issuer`` None, self-signed) or a leaf for 127.0.0.1 signed by ``issuer``."""
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer[0].subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), True)
    )
    if issuer is not None:
        names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), False)
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


@dataclass
class Pki:
    """PEM files: a CA, the EPP's and Envoy's certificates, and a client of another CA."""

    ca: Path
    server: tuple[Path, Path]
    client: tuple[Path, Path]
    stranger: tuple[Path, Path]


def make_pki(directory: Path) -> Pki:
    def write(name: str, data: bytes) -> Path:
        path = directory / name
        path.write_bytes(data)
        return path

    def leaf(name: str, issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey]) -> tuple:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(name, key, issuer)
        pem = cert.public_bytes(serialization.Encoding.PEM)
        return write(f"{name}.crt", pem), write(f"{name}.key", _pem(key))

    ca_key, other_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    ca, other = _certificate("ca", ca_key, None), _certificate("other-ca", other_key, None)
    return Pki(
        ca=write("ca.crt", ca.public_bytes(serialization.Encoding.PEM)),
        server=leaf("epp", (ca, ca_key)),
        client=leaf("envoy", (ca, ca_key)),
        stranger=leaf("stranger", (other, other_key)),
    )


@dataclass
class World:
    loop: LoopThread
    upstream: Upstream
    fleet: Fleet
    decision: RoundRobinDecision


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    loop = LoopThread()
    upstream = Upstream("u0", free_port())
    loop.run(upstream.start())
    fleet = load_fleet_text(fleet_yaml({"eu-west": [("u0", upstream.address, ["m1"])]}))
    decision = RoundRobinDecision(fleet, tokens={TOKEN: ClientIdentity("tester")})
    try:
        yield World(loop, upstream, fleet, decision)
    finally:
        loop.run(upstream.stop())
        loop.stop()


def _through_envoy(world: World, envoy_path: Path, workdir: Path, options: EnvoyOptions) -> int:
    """The status of one chat completion through an Envoy running ``options``."""
    config = workdir / "envoy.yaml"
    config.write_text(render(world.fleet, options))
    admin = int(options.admin.rsplit(":", 1)[1])
    envoy = EnvoyProcess(envoy_path, config, admin, workdir / "envoy.log")
    try:
        envoy.wait_ready()
        reply = post(f"http://{options.listen}/v1/chat/completions", CHAT, AUTH)
        assert reply.status != 200 or reply.headers["x-upstream"] == "u0"
        return reply.status
    finally:
        envoy.stop()


def _options(epp: str, **tls: str) -> EnvoyOptions:
    listen, admin = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    return EnvoyOptions(listen=listen, epp=epp, admin=admin, **tls)  # type: ignore[arg-type]


def test_unix_socket_through_envoy(world: World, envoy_path: Path, tmp_path: Path) -> None:
    epp = f"unix:{tmp_path}/epp.sock"
    server = world.loop.run(start_server(world.decision, epp))
    try:
        assert _through_envoy(world, envoy_path, tmp_path, _options(epp)) == 200
    finally:
        world.loop.run(server.stop(0))


def test_mtls_through_envoy(world: World, envoy_path: Path, tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    tls = ServerTls.from_files(str(pki.server[0]), str(pki.server[1]), str(pki.ca))
    epp = f"127.0.0.1:{free_port()}"
    server = world.loop.run(start_server(world.decision, epp, tls=tls))
    try:
        client = {
            "epp_tls_cert": str(pki.client[0]),
            "epp_tls_key": str(pki.client[1]),
            "epp_tls_ca": str(pki.ca),
        }
        assert _through_envoy(world, envoy_path, tmp_path, _options(epp, **client)) == 200
        # the same Envoy without its certificate cannot reach the EPP: no request routed
        assert _through_envoy(world, envoy_path, tmp_path, _options(epp)) != 200
    finally:
        world.loop.run(server.stop(0))


def _health(address: str, credentials: grpc.ChannelCredentials | None) -> int:
    channel = (
        grpc.secure_channel(address, credentials)
        if credentials is not None
        else grpc.insecure_channel(address)
    )
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service="liveness")
        return int(stub.Check(request, timeout=3).status)


def test_mtls_refuses_peers_without_a_trusted_certificate(world: World, tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    tls = ServerTls.from_files(str(pki.server[0]), str(pki.server[1]), str(pki.ca))
    address = f"127.0.0.1:{free_port()}"
    server = world.loop.run(start_server(world.decision, address, tls=tls))
    ca = pki.ca.read_bytes()

    def creds(pair: tuple[Path, Path] | None) -> grpc.ChannelCredentials:
        if pair is None:
            return grpc.ssl_channel_credentials(root_certificates=ca)
        key, cert = pair[1].read_bytes(), pair[0].read_bytes()
        return grpc.ssl_channel_credentials(ca, private_key=key, certificate_chain=cert)

    try:
        assert _health(address, creds(pki.client)) == health_pb2.HealthCheckResponse.SERVING
        for credentials in (None, creds(None), creds(pki.stranger)):
            with pytest.raises(grpc.RpcError) as caught:
                _health(address, credentials)
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        world.loop.run(server.stop(0))
