"""Print parameter counts of backbone / selector / executor / critic.

Usage: ``python -m agents.params``. Two settings:

- default: ``ActorConfig()`` / ``CriticConfig()`` on the bundled envs' default observations
  (8 agents, 3 x 16 x 16 local maps plus a small vector);
- LPAC paper: ``ActorConfig.lpac()`` with 32 robots and 4 x 32 x 32 local maps.

The critic's size depends on the global-state length G of the env; a nominal G (stated in
the output) is used where no env provides it.
"""

from __future__ import annotations

import equinox as eqx
import jax
import numpy as np
from gymnasium import spaces

from agents.actor import FeudalActor
from agents.config import ActorConfig, CriticConfig
from agents.critic import CentralCritic
from agents.layers import count_params
from agents.partition import executor_filter, selector_filter


def _space(channels: int, size: int, vec: int) -> spaces.Dict:
    box = lambda shape: spaces.Box(-np.inf, np.inf, shape=shape, dtype=np.float32)
    return spaces.Dict({"maps": box((channels, size, size)), "vec": box((vec,))})


def counts(
    num_agents: int,
    obs_space: spaces.Space,
    action_space: spaces.Space,
    num_skills: int,
    global_state_size: int,
    actor_config: ActorConfig | None = None,
    critic_config: CriticConfig | None = None,
) -> dict[str, int]:
    """Parameter counts by part; selector + executor_total == actor."""
    actor_config = ActorConfig() if actor_config is None else actor_config
    critic_config = CriticConfig() if critic_config is None else critic_config
    key_a, key_c = jax.random.split(jax.random.key(0))
    actor = FeudalActor(key_a, obs_space, action_space, num_skills, actor_config)
    critic = CentralCritic(key_c, global_state_size, num_agents, num_skills, critic_config)
    actor_total = count_params(actor)
    return {
        "backbone": count_params(actor.backbone),
        "selector": count_params(actor.selector),
        "executor head": count_params(actor.executor),
        "executor total (backbone + head)": count_params(eqx.filter(actor, executor_filter(actor))),
        "actor": actor_total,
        "critic": count_params(critic),
        "_selector_check": count_params(eqx.filter(actor, selector_filter(actor))),
    }


def main() -> None:
    action = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    settings = [
        ("default (8 agents, 3x16x16 maps + 4-d vec, K=3 skills)", 8, _space(3, 16, 4),
         ActorConfig(), 4 * 8),
        ("LPAC paper (32 robots, 4x32x32 maps + 2-d vec, K=3 skills)", 32, _space(4, 32, 2),
         ActorConfig.lpac(), 4 * 32),
    ]  # fmt: skip
    for title, n, obs_space, cfg, g in settings:
        c = counts(n, obs_space, action, 3, g, cfg)
        assert c.pop("_selector_check") == c["selector"]
        print(f"{title}; critic global state G={g} (nominal)")
        for name, v in c.items():
            print(f"  {name:<34s} {v:>10,d}")
        print(f"  {'selector share of actor':<34s} {100 * c['selector'] / c['actor']:>9.3f}%")


if __name__ == "__main__":
    main()
