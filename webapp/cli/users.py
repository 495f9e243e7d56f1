"""``proxima user``: researcher accounts (add, remove, passwd, list) on the instance's Redis.

Never imports Flask (the account functions take a Redis connection).
"""
from __future__ import annotations

import sys
import time

import click

from .connection import redis_connection


@click.group()
def user() -> None:
    """Researcher accounts: add, remove, change a password, list."""


def _read_new_password(password_stdin: bool, generate: bool) -> tuple[str, bool]:
    """(password, generated): typed twice, read from stdin, or generated."""
    from ..accounts import AccountError, check_password, generate_password

    if password_stdin and generate:
        raise click.UsageError("use either --password-stdin or --generate, not both")
    if generate:
        return generate_password(), True
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt="Repeat the password")
    try:
        return check_password(password), False
    except AccountError as exc:
        raise click.ClickException(str(exc)) from None


def _password_options(command):
    command = click.option("--generate", is_flag=True, help="Generate a random password and print it once.")(command)
    return click.option("--password-stdin", is_flag=True,
                        help="Read the password from the first line of standard input.")(command)


@user.command("add")
@click.argument("name")
@_password_options
def user_add(name: str, password_stdin: bool, generate: bool) -> None:
    """Create a researcher account NAME (asks for the password twice)."""
    from ..accounts import AccountError, check_name, create_user, user_key

    try:
        name = check_name(name)
    except AccountError as exc:
        raise click.ClickException(str(exc)) from None
    with redis_connection() as conn:
        if conn.exists(user_key(name)):
            raise click.ClickException(f"account {name!r} already exists "
                                       f"(change its password with 'proxima user passwd {name}')")
        password, generated = _read_new_password(password_stdin, generate)
        try:
            create_user(conn, name, password)
        except AccountError as exc:
            raise click.ClickException(str(exc)) from None
    click.echo(f"Created account {name}.")
    if generated:
        click.echo(f"Password: {password}\n(shown only now; change it with: proxima user passwd {name})")


@user.command("remove")
@click.argument("name")
def user_remove(name: str) -> None:
    """Delete the researcher account NAME; its open sessions end at their next request."""
    from ..accounts import AccountError, count_users, remove_user

    with redis_connection() as conn:
        try:
            remove_user(conn, name)
        except AccountError as exc:
            raise click.ClickException(str(exc)) from None
        left = count_users(conn)
    click.echo(f"Removed account {name.strip().lower()}.")
    if not left:
        click.echo("No accounts are left: the next 'proxima serve' creates an 'admin' account.", err=True)


@user.command("passwd")
@click.argument("name")
@_password_options
def user_passwd(name: str, password_stdin: bool, generate: bool) -> None:
    """Change the password of NAME and log out its sessions."""
    from ..accounts import set_password, user_key

    name = name.strip().lower()
    with redis_connection() as conn:
        if not conn.exists(user_key(name)):
            raise click.ClickException(f"there is no account {name!r} (see 'proxima user list')")
        password, generated = _read_new_password(password_stdin, generate)
        set_password(conn, name, password)
    click.echo(f"Changed the password of {name}; its sessions are logged out.")
    if generated:
        click.echo(f"Password: {password}\n(shown only now)")


@user.command("list")
def user_list() -> None:
    """List the researcher accounts."""
    from ..accounts import list_users

    with redis_connection() as conn:
        users = list_users(conn)
    if not users:
        click.echo("No accounts yet. Create one with: proxima user add NAME", err=True)
    for account in users:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(account["created_at"]))
        click.echo(f"{account['name']}\tcreated {created}")
