"""Settings of the test authorization server, read from the environment serve.py sets.

Only what django-oauth-toolkit (DOT) needs: no admin, no templates beyond DOT's own (unused:
every application skips the consent page), no static files. serve.py sets DOT_* variables
from its command line before Django reads this module.
"""

import os

DOT_DATA_DIR = os.environ["DOT_DATA_DIR"]


def _seconds(name, default):
    value = os.environ.get(name, "")
    return int(value) if value else default


SECRET_KEY = "urltaskmanager-tests-only-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "dotserver.urls"
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # The browser's sign-in, test project only: HTTP Basic with the test user's credentials on
    # the authorization endpoint (see dotserver/middleware.py).
    "dotserver.middleware.TestUserBasicAuthMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.contrib.auth.context_processors.auth"]},
    }
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.path.join(DOT_DATA_DIR, "db.sqlite3"),
        # The server's threads write at once (token requests, sessions): wait for the lock
        # rather than fail with "database is locked", and take it when a transaction starts.
        "OPTIONS": {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Django's default hasher runs PBKDF2 with a million iterations for every client secret it
# checks (DOT hashes client secrets with it): seconds per token request on a loaded 2-core
# machine. Tests only: a fast hasher.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

LOGIN_URL = "/test/login-required"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {
        "django": {"handlers": ["stderr"], "level": "WARNING"},
        "oauth2_provider": {"handlers": ["stderr"], "level": "WARNING"},
    },
}

CUSTOM_REDIRECT_SCHEME = os.environ.get("DOT_CUSTOM_SCHEME", "com.example.app")

OAUTH2_PROVIDER = {
    "ACCESS_TOKEN_EXPIRE_SECONDS": _seconds("DOT_ACCESS_TOKEN_SECONDS", 3600),
    "ROTATE_REFRESH_TOKEN": os.environ.get("DOT_ROTATE_REFRESH_TOKEN", "1") == "1",
    "REFRESH_TOKEN_GRACE_PERIOD_SECONDS": _seconds("DOT_REFRESH_GRACE_SECONDS", 0),
    "PKCE_REQUIRED": True,
    # RFC 9700 §2.1.1: S256 only, and RFC 9207's `iss` on every authorization response when
    # asked for.
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,
    "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": os.environ.get("DOT_AUTHZ_RESPONSE_ISS", "0") == "1",
    "ALLOWED_REDIRECT_URI_SCHEMES": ["http", "https", CUSTOM_REDIRECT_SCHEME],
    "ALLOWED_SCHEMES": ["http", "https", CUSTOM_REDIRECT_SCHEME],
    # RFC 8252 §7.3: a loopback redirect URI matches whatever port the app listens on.
    "ALLOW_LOCALHOST_LOOPBACK": True,
    "SCOPES": {"read": "Reading scope", "write": "Writing scope", "introspection": "Introspect tokens"},
    "DEFAULT_SCOPES": ["read", "write"],
    "OAUTH2_VALIDATOR_CLASS": "dotserver.validators.TestValidator",
}

# The issuer: the server's origin, which serve.py knows once it has bound the port (RFC 8414's
# `issuer`, RFC 9207's `iss`); RFC 9728's metadata names it as the authorization server.
OAUTH2_PROVIDER["OIDC_ISS_ENDPOINT"] = os.environ.get("DOT_ISSUER", "")
OAUTH2_PROVIDER["OAUTH2_PROTECTED_RESOURCE_AUTHORIZATION_SERVERS"] = [os.environ.get("DOT_ISSUER", "")]
