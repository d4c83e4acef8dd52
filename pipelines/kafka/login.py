"""Why a SASL client got nowhere: one login attempt on its own connection, read to the broker's
answer.

A broker that refuses a SASL login answers with the reason and closes the connection at once.
kafka-python 3.0 drops an answer that arrives together with the close, so a wrong password
looks to its clients like a broker that never answers: they retry until their bootstrap
timeout and report "Unable to bootstrap". This attempt reads with a blocking socket and
gets the broker's reason.
"""

from __future__ import annotations

import socket
import ssl
from typing import Any

from kafka.net.sasl import get_sasl_mechanism
from kafka.protocol.parser import KafkaProtocol
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

TIMEOUT_S = 10.0


def login_refusal(bootstrap: str, client: dict[str, Any]) -> str | None:
    """The broker's reason for refusing the login of `client` (kafka-python settings,
    pipelines.kafka.security.for_python) at the first address of `bootstrap`; None when
    the client uses no SASL, the login succeeds or no broker answers at all."""
    protocol = client.get("security_protocol", "PLAINTEXT")
    if protocol not in ("SASL_PLAINTEXT", "SASL_SSL") or not bootstrap.strip():
        return None
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), TIMEOUT_S) as raw:
            if protocol == "SASL_SSL":
                context = ssl.create_default_context(cafile=client.get("ssl_cafile"))
                context.check_hostname = client.get("ssl_check_hostname", True)
                with context.wrap_socket(raw, server_hostname=host) as secured:
                    return _attempt(secured, host, client)
            return _attempt(raw, host, client)
    except (OSError, ValueError, KeyError):
        return None  # unreachable, or not a Kafka broker: the client's own error says so


def _attempt(sock: socket.socket, host: str, client: dict[str, Any]) -> str | None:
    wire = KafkaProtocol(client_id="seedance-login-check")
    mechanism_name = client.get("sasl_mechanism", "PLAIN")
    handshake = _exchange(sock, wire, SaslHandshakeRequest(mechanism=mechanism_name,
                                                           version=1))
    if handshake.error_code:
        return (f"the broker does not offer SASL mechanism {mechanism_name} (it offers "
                f"{', '.join(handshake.mechanisms) or 'none'})")
    mechanism = get_sasl_mechanism(mechanism_name)(host=host, **client)
    while not mechanism.is_done():
        answer = _exchange(sock, wire, SaslAuthenticateRequest(
            auth_bytes=mechanism.auth_bytes(), version=1))
        if answer.error_code:
            return str(answer.error_message or f"error code {answer.error_code}")
        mechanism.receive(answer.auth_bytes)
    return None


def _exchange(sock: socket.socket, wire: KafkaProtocol, request: Any) -> Any:
    wire.send_request(request)
    sock.sendall(wire.send_bytes())
    while True:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("the broker closed the connection")
        for _, response in wire.receive_bytes(data):
            return response
