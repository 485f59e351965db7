"""A user's env module, as the README's "Your own PettingZoo env" shows one: it defines a
PettingZoo env and registers it on import, so ``feudal-es ... --import user_envs`` can
name ``tests/CliLine-v0`` (the CLI tests' subprocesses do exactly that)."""

from __future__ import annotations

import pettingzoo
from line_envs import Line


class CliLine(Line):
    """``Line`` with 8-step episodes."""

    def __init__(self, max_cycles: int = 8):
        super().__init__(max_cycles)


pettingzoo.register("parallel", "tests/CliLine-v0", entry_point=CliLine)
