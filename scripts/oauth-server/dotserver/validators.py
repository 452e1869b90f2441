"""DOT's validator with one change: the confidential test client may use client credentials too.

DOT gives an application one authorization grant type; the kit's tests want a single
confidential client that signs users in (authorization code, then refresh tokens) and also
obtains tokens of its own (client credentials, RFC 6749 §4.4).
"""

import os

from oauth2_provider.oauth2_validators import OAuth2Validator


class TestValidator(OAuth2Validator):
    def validate_grant_type(self, client_id, grant_type, client, request, *args, **kwargs):
        if grant_type == "client_credentials" and request.client.client_id == os.environ.get("DOT_CONFIDENTIAL_ID"):
            return True
        return super().validate_grant_type(client_id, grant_type, client, request, *args, **kwargs)
