"""Test-only middleware: the browser's sign-in, and a record of every request.

A browser reaches the authorization endpoint with the user signed in to the authorization
server. The tests have no browser: their "browser" sends the test user's name and password as
HTTP Basic to the authorization endpoint alone, and this middleware signs that request in
(no session, no cookie). Nowhere else is Basic read this way (it is client authentication at
the token, introspection and revocation endpoints), and a request without it is left to DOT,
which redirects to the login URL. No challenge is ever sent: a 401 with `WWW-Authenticate:
Basic` never completes in swift-corelibs-foundation without a credential.
"""

import base64

from django.contrib.auth import authenticate


class TestUserBasicAuthMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path == "/o/authorize/":
            header = request.META.get("HTTP_AUTHORIZATION", "")
            if header.lower().startswith("basic "):
                try:
                    username, _, password = base64.b64decode(header[6:]).decode("utf-8").partition(":")
                except ValueError:
                    username, password = "", ""
                user = authenticate(request, username=username, password=password)
                if user is not None:
                    request.user = user
        return self.get_response(request)
