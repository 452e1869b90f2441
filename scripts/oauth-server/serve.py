#!/usr/bin/env python3
"""Starts the test authorization server: django-oauth-toolkit on 127.0.0.1, a free port.

Run with the virtual environment's python (scripts/oauth-server/install.sh makes it). It
creates a SQLite database in a new temporary directory, migrates it, creates the test user
and the two clients, binds 127.0.0.1 on a port the system chooses, prints one line

    DOT-READY port=NNNN startup_ms=NNN

and serves with waitress (threaded) until its standard input closes or it gets SIGTERM or
SIGINT; then it prints `DOT-STOPPED`, removes the directory and exits 0. Every request it
answers is printed as a `DOT-REQUEST ...` line (no token or secret in it). Anything else
(Django's warnings, a traceback) goes to standard error.

The clients (their ids and secrets are fixed test values, overridable here):
  confidential  authorization code (PKCE), refresh token, client credentials; HTTP Basic or
                the form; redirect URIs http://127.0.0.1/callback (any port, RFC 8252) and
                <scheme>:/callback
  public        authorization code (PKCE), refresh token; no secret; the same redirect URIs
The user: --username / --password. Both clients skip the consent page.
"""

import argparse
import hashlib
import os
import socket
import sqlite3
import shutil
import signal
import sys
import tempfile
import threading
import time


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--access-token-seconds", type=int, default=3600, help="ACCESS_TOKEN_EXPIRE_SECONDS")
    parser.add_argument(
        "--rotate-refresh-tokens", choices=["yes", "no"], default="yes", help="ROTATE_REFRESH_TOKEN (default yes)"
    )
    parser.add_argument(
        "--refresh-grace-seconds", type=int, default=0, help="REFRESH_TOKEN_GRACE_PERIOD_SECONDS (default 0: none)"
    )
    parser.add_argument(
        "--authorization-response-iss", choices=["yes", "no"], default="no", help="RFC 9207 `iss` on authorization responses"
    )
    parser.add_argument("--custom-scheme", default="com.example.app", help="the public app's redirect URI scheme")
    parser.add_argument("--confidential-id", default="urltaskmanager-confidential")
    parser.add_argument("--confidential-secret", default="confidential-secret-for-tests-only")
    parser.add_argument("--public-id", default="urltaskmanager-public")
    parser.add_argument("--username", default="ada")
    parser.add_argument("--password", default="password-for-tests-only")
    parser.add_argument("--threads", type=int, default=16, help="waitress worker threads")
    parser.add_argument("--port", type=int, default=0, help="0: a port the system chooses")
    return parser.parse_args()


def main():
    started = time.monotonic()
    arguments = parse_arguments()
    data_directory = tempfile.mkdtemp(prefix="dot-server-")
    # Bound before Django reads its settings: the issuer (RFC 8414's `issuer`, RFC 9207's
    # `iss`, RFC 9728's authorization server) names the port.
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", arguments.port))
    port = listener.getsockname()[1]
    os.environ.update(
        {
            "DOT_ISSUER": "http://127.0.0.1:{}".format(port),
            "DJANGO_SETTINGS_MODULE": "dotserver.settings",
            "DOT_DATA_DIR": data_directory,
            "DOT_ACCESS_TOKEN_SECONDS": str(arguments.access_token_seconds),
            "DOT_ROTATE_REFRESH_TOKEN": "1" if arguments.rotate_refresh_tokens == "yes" else "0",
            "DOT_REFRESH_GRACE_SECONDS": str(arguments.refresh_grace_seconds),
            "DOT_AUTHZ_RESPONSE_ISS": "1" if arguments.authorization_response_iss == "yes" else "0",
            "DOT_CUSTOM_SCHEME": arguments.custom_scheme,
            "DOT_CONFIDENTIAL_ID": arguments.confidential_id,
        }
    )
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

    stopping = threading.Event()

    def stop(*_):
        stopping.set()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        serve(arguments, listener, started, stopping)
    except SystemExit:
        pass
    finally:
        shutil.rmtree(data_directory, ignore_errors=True)
        print("DOT-STOPPED", flush=True)
    # Waitress's worker threads are not daemons: leave without waiting for them.
    os._exit(0)


def migrate():
    """Migrates the new database, or copies a migrated one: the migrations take a second or
    more on a loaded machine, each start. The copy is kept in the virtual environment, named
    after this project's files (a change of settings may change the schema)."""
    from django.conf import settings
    from django.core.management import call_command

    here = os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    for name in sorted(os.listdir(os.path.join(here, "dotserver"))):
        if name.endswith(".py"):
            with open(os.path.join(here, "dotserver", name), "rb") as file:
                digest.update(name.encode() + b"\0" + file.read())
    template = os.path.join(sys.prefix, "dot-migrated-{}.sqlite3".format(digest.hexdigest()[:16]))
    database = settings.DATABASES["default"]["NAME"]
    if os.path.exists(template):
        shutil.copyfile(template, database)
        return
    call_command("migrate", verbosity=0, interactive=False)
    # SQLite's backup API writes a consistent copy, the write-ahead log included; renamed into
    # place so that a concurrent start never copies half a file. Where the environment cannot
    # be written, every start migrates.
    partial = "{}.{}.partial".format(template, os.getpid())
    try:
        source, target = sqlite3.connect(database), sqlite3.connect(partial)
        try:
            source.backup(target)
        finally:
            target.close()
            source.close()
        os.replace(partial, template)
    except (OSError, sqlite3.Error) as error:
        print("dot-server: the migrated database is not kept ({})".format(error), file=sys.stderr)


def set_up(arguments):
    import django

    django.setup()
    migrate()

    from django.contrib.auth import get_user_model
    from oauth2_provider.models import get_application_model

    user = get_user_model().objects.create_user(arguments.username, password=arguments.password)
    Application = get_application_model()
    redirects = "http://127.0.0.1/callback {}:/callback".format(arguments.custom_scheme)
    Application.objects.create(
        name="confidential",
        client_id=arguments.confidential_id,
        client_secret=arguments.confidential_secret,
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=redirects,
        skip_authorization=True,
        user=user,
    )
    Application.objects.create(
        name="public",
        client_id=arguments.public_id,
        client_secret="",
        client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=redirects,
        skip_authorization=True,
        user=user,
    )


def serve(arguments, listener, started, stopping):
    set_up(arguments)

    import waitress
    from django.core.wsgi import get_wsgi_application

    from dotserver.recorder import RecordingMiddleware

    application = RecordingMiddleware(get_wsgi_application())
    server = waitress.create_server(
        application, sockets=[listener], threads=arguments.threads, ident="dot-tests",
        # Tests send bursts of concurrent requests: let none wait for a listen slot.
        backlog=1024, connection_limit=1000, channel_timeout=30,
    )

    def watch_standard_input():
        # The parent closes our standard input to stop us, or dies and it closes by itself.
        while sys.stdin.buffer.read(4096):
            pass
        if not stopping.is_set():
            os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch_standard_input, daemon=True).start()
    print(
        "DOT-READY port={} startup_ms={}".format(listener.getsockname()[1], int((time.monotonic() - started) * 1000)),
        flush=True,
    )
    server.run()


if __name__ == "__main__":
    main()
