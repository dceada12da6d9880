"""Who a client certificate names: the role of Pulsar's ``AuthenticationProviderTls``.

Pulsar takes the subject's distinguished name as RFC 2253 writes it (``CN=role,O=org,C=GB``,
the most specific part first) and the first non-empty ``CN`` in it is the role. A certificate
without one authenticates nobody.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The method name the official clients' ``AuthenticationTLS`` send in CONNECT.
AUTH_METHOD_NAME = "tls"
#: Pulsar's message when a certificate names no role.
NO_ROLE = "Client unable to authenticate with TLS certificate"


def role_from_certificate(cert: Mapping[str, Any] | None) -> str | None:
    """The role a verified peer certificate names, or None.

    ``cert`` is what ``ssl.SSLSocket.getpeercert()`` (and an asyncio transport's
    ``get_extra_info("peercert")``) returns: ``{"subject": ((("commonName", "x"),), ...), ...}``,
    the relative distinguished names in the certificate's own order. RFC 2253 writes them in
    reverse, so the last ``commonName`` encoded is the first Pulsar sees. Empty or None (no
    certificate, or one that was not verified) names nobody.
    """
    if not cert:
        return None
    subject = cert.get("subject") or ()
    for rdn in reversed(tuple(subject)):
        for attribute in rdn:
            if len(attribute) == 2 and attribute[0] == "commonName" and attribute[1]:
                return str(attribute[1])
    return None
