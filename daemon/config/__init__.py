"""The daemon's configuration: one TOML file, environment overrides, secrets, and ``sightscreen check-config``.

- ``models``: the ``Config`` model and the sections it owns (instance, admin, logging, metrics); every other
  section is its component's own settings class.
- ``loading``: the file, ``SIGHTSCREEN_*`` overrides, ``*_file`` secrets, and errors naming each wrong key.
- ``example``: the annotated example configuration generated from the models.
- ``credentials``: the engine's credentials and their files, checked beyond the models by ``check-config``
  (``daemon.commands.check_config``).

The names below are the package's public surface; ``from daemon.config import ...`` is the way to use them.
"""

from actors.jobs.settings import JobsSettings
from actors.settings import MatchActorSettings, OrchestratorSettings
from daemon.config.example import render_example
from daemon.config.loading import ConfigError, ConfigProblem, load_config, register_secrets
from daemon.config.models import (
    DEFAULT_ADMIN_SOCKET,
    DEFAULT_CONFIG_PATH,
    ENV_PREFIX,
    AdminSettings,
    Config,
    InstanceSettings,
    LoggingSettings,
    MetricsSettings,
    default_instance_id,
)

__all__ = [
    "DEFAULT_ADMIN_SOCKET",
    "DEFAULT_CONFIG_PATH",
    "ENV_PREFIX",
    "AdminSettings",
    "Config",
    "ConfigError",
    "ConfigProblem",
    "InstanceSettings",
    "JobsSettings",
    "LoggingSettings",
    "MatchActorSettings",
    "MetricsSettings",
    "OrchestratorSettings",
    "default_instance_id",
    "load_config",
    "register_secrets",
    "render_example",
]
