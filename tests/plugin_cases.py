"""Plugins that must be refused or fail, given to persalign by module:Attribute path in tests."""

from persalign.rewards.global_rm import GlobalRM


class NotAMethod:
    """Has a name and nothing else a reward method needs."""

    name = "not_a_method"


class FailingMethod(GlobalRM):
    """Trains like Global RM, then fails for good: a plugin with a bug, as users will write them."""

    name, display = "failing", "Failing RM"

    def fit(self, backbone, train, val=None):
        raise RuntimeError("this plugin fails on purpose")


not_a_class = 3


class NanRewards(GlobalRM):
    """Trains like Global RM, then its rewards are NaN: a plugin with a numerical bug."""

    name, display = "nan_rewards", "NaN RM"

    def token_rewards(self, states, users):
        rewards = super().token_rewards(states, users)
        return rewards if self.training else rewards * float("nan")


class SettingsNotADataclass(GlobalRM):
    """A plugin whose Settings is a plain class."""

    name, display = "plain_settings", "Plain Settings RM"

    class Settings:
        epochs = 3
