"""The HTTP port's answer when no descriptor is left: given once the request is read whole, so
that closing the connection does not reset it before the client reads the answer."""

from __future__ import annotations

import json

from magnetar.admin.http_refusal import OUT_OF_DESCRIPTORS, request_complete


def test_a_request_is_complete_with_its_headers_and_the_body_they_announce():
    get = b"GET /metrics HTTP/1.1\r\nHost: h\r\n"
    assert not request_complete(get)
    assert request_complete(get + b"\r\n")
    post = b"POST /admin/v2/x HTTP/1.1\r\ncontent-length: 5\r\n\r\n"
    assert not request_complete(post + b"abc")
    assert request_complete(post + b"abcde")


def test_the_answer_is_a_503_with_pulsars_json_reason():
    head, body = OUT_OF_DESCRIPTORS.reply.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 503 ")
    assert f"Content-Length: {len(body)}".encode() in head
    assert "out of file descriptors" in json.loads(body)["reason"]
