"""What the console's own admin paths need (admin/authz.py), and that its page is open."""

from __future__ import annotations

from magnetar.admin import auth, authz


def test_the_console_paths_need_what_their_figures_need():
    assert authz.requirement("GET", "/admin/v2/console/session") == (authz.OPEN, None)
    assert authz.requirement("GET", "/admin/v2/console/overview") == (authz.OPEN, None)
    assert authz.requirement("GET", "/admin/v2/console/namespaces") == (authz.OPEN, None)
    # a page of a namespace's topics: as listing them (a namespace grant, or a tenant admin)
    assert authz.requirement("GET", "/admin/v2/console/topics/{tenant}/{namespace}") == (
        authz.LIST_TOPICS,
        None,
    )
    assert authz.requirement("GET", "/admin/v2/console/other/thing") == (authz.OPEN, None)


def test_only_the_page_itself_is_served_without_credentials():
    assert auth.is_console_page("/console")
    assert auth.is_console_page("/console/")
    assert auth.is_console_page("/console/console.js")
    assert not auth.is_console_page("/consoles")
    assert not auth.is_console_page("/admin/v2/console/session")
