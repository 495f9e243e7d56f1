"""``proxima token``: researcher API tokens (create, list, revoke) on the instance's Redis, for programs
that read studies without a browser (``proxima.connect(url, token)``, curl, R).

Never imports Flask (the token functions take a Redis connection).
"""
from __future__ import annotations

import time

import click

from .connection import redis_connection


@click.group()
def token() -> None:
    """Researcher API tokens: create (shown once), list, revoke."""


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(ts)) + " UTC" if ts else "never"


@token.command("create")
@click.option("--user", "owner", required=True, help="The researcher account the token acts for.")
@click.option("--name", required=True, help="What the token is for, e.g. 'laptop analysis'.")
@click.option("--study", default=None, metavar="STUDY_ID", help="Limit the token to one study (default: every study).")
@click.option("--write", is_flag=True, help="Read-write: may also start, pause and close studies (default: read-only).")
@click.option("--expires-days", type=click.IntRange(1, 3650), default=None,
              help="The token stops working after this many days (default: when revoked).")
def token_create(owner: str, name: str, study: str | None, write: bool, expires_days: int | None) -> None:
    """Create an API token and print it once (only its hash is kept)."""
    from ..accounts import normalize_name
    from ..api_tokens import TokenError, create_token

    with redis_connection() as conn:
        try:
            secret, record = create_token(conn, normalize_name(owner), name, study=study,
                                          access="write" if write else "read", expires_days=expires_days)
        except TokenError as exc:
            raise click.ClickException(str(exc)) from None
    scope = f"study {record['study']}" if record["study"] else "every study"
    access = "read-write" if record["access"] == "write" else "read-only"
    until = f", expires {_when(record['expires_at'])}" if record["expires_at"] else ""
    click.echo(f"Created token {record['id']} ({access}, {scope}{until}) for {record['owner']}:")
    click.echo(secret)
    click.echo("It is shown only now: store it like a password. In Python: "
               "proxima.connect(URL, TOKEN).study(STUDY_ID)", err=True)


@token.command("list")
@click.option("--user", "owner", default=None, help="Only this account's tokens.")
def token_list(owner: str | None) -> None:
    """List API tokens (never their secrets): id, account, access, scope, name, created, last used."""
    from ..accounts import normalize_name
    from ..api_tokens import list_tokens

    with redis_connection() as conn:
        records = list_tokens(conn, normalize_name(owner) if owner else None)
    if not records:
        click.echo("No API tokens." + ("" if owner else " Create one with 'proxima token create'."))
        return
    for r in records:
        click.echo(f"{r['id']}\t{r['owner']}\t{'read-write' if r['access'] == 'write' else 'read-only'}\t"
                   f"{r['study'] or 'every study'}\t{r['name']}\tcreated {_when(r['created_at'])}\t"
                   f"last used {_when(r['last_used_at'])}\t"
                   f"{'expires ' + _when(r['expires_at']) if r['expires_at'] else 'no expiry'}")


@token.command("revoke")
@click.argument("token_id")
def token_revoke(token_id: str) -> None:
    """Revoke the token TOKEN_ID (its id from 'proxima token list', or the whole token): it stops working at once."""
    from ..api_tokens import TokenError, revoke_token

    with redis_connection() as conn:
        try:
            record = revoke_token(conn, token_id)
        except TokenError as exc:
            raise click.ClickException(str(exc)) from None
    click.echo(f"Revoked token {record['id']} ({record['name']}) of {record['owner']}.")
