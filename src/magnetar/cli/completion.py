"""``magnetar completion bash|zsh|fish``: the shell script that completes ``magnetar``'s
subcommands and flags.

The completion itself is click's: the script calls ``magnetar`` back with
``_MAGNETAR_COMPLETE=<shell>_complete`` and the words typed so far, and click answers from the
command tree, so a new command or flag completes without touching the script.
"""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

#: The environment variable click's completion protocol reads (from the program's name).
COMPLETE_VAR = "_MAGNETAR_COMPLETE"
SHELLS = ("bash", "zsh", "fish")


def completion_script(root: click.Command, shell: str, prog_name: str = "magnetar") -> str:
    """The script for ``shell`` that completes ``root`` (a shell click knows, as SHELLS)."""
    completion_class = get_completion_class(shell)
    if completion_class is None:
        raise click.BadParameter(f"no completion for {shell!r}", param_hint="SHELL")
    return completion_class(root, {}, prog_name, COMPLETE_VAR).source()


@click.command("completion", short_help="Print the shell completion script (bash, zsh, fish).")
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> int:
    """Print the shell completion script for SHELL (see docs/cli.md to install it).

    \b
    bash: eval "$(magnetar completion bash)"       (in ~/.bashrc)
    zsh:  eval "$(magnetar completion zsh)"        (in ~/.zshrc)
    fish: magnetar completion fish > ~/.config/fish/completions/magnetar.fish
    """
    click.echo(completion_script(ctx.find_root().command, shell))
    return 0
