"""Print parameter counts of backbone / selector / executor / critic.

Usage: ``python -m agents.params``. Two settings:

- default: ``ActorConfig()`` / ``CriticConfig()`` on the default bundled Coverage env
  (8 agents, 3 x 16 x 16 local maps and a 2-d vector, 2 skills);
- LPAC paper: ``ActorConfig.lpac()`` with 32 robots, 4 x 32 x 32 local maps and a 2-d
  vector (2 skills); the critic's global-state length is Coverage's at 32 robots.

The envs are used only for their spaces and sizes (no env is stepped).
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
    from envs.coverage import Coverage  # spaces and sizes only

    env = Coverage()
    lpac_g = Coverage(num_agents=32).global_state_size
    settings = [
        (
            f"default: Coverage env ({env.num_agents} agents, maps "
            f"{env.observation_space['maps'].shape}, vec {env.observation_space['vec'].shape}, "
            f"K={env.num_skills} skills, critic G={env.global_state_size})",
            env.num_agents, env.observation_space, env.action_space, env.num_skills,
            env.global_state_size, ActorConfig(),
        ),
        (
            f"LPAC paper sizes (32 robots, maps (4, 32, 32), vec (2,), K=2 skills, "
            f"critic G={lpac_g})",
            32, _space(4, 32, 2), env.action_space, 2, lpac_g, ActorConfig.lpac(),
        ),
    ]  # fmt: skip
    for title, n, obs_space, action_space, k, g, cfg in settings:
        c = counts(n, obs_space, action_space, k, g, cfg)
        assert c.pop("_selector_check") == c["selector"]
        print(title)
        for name, v in c.items():
            print(f"  {name:<34s} {v:>10,d}")
        print(f"  {'selector share of actor':<34s} {100 * c['selector'] / c['actor']:>9.3f}%")


if __name__ == "__main__":
    main()
