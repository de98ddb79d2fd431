"""Build the Strategy a TrainConfig asks for (static, DRO family, influence family, transfer)."""
from __future__ import annotations

import logging

from drmix.config import TrainConfig
from drmix.errors import ConfigError
from drmix.mixture.base import Strategy
from drmix.mixture.static import StaticStrategy, file_mixture_weights

log = logging.getLogger(__name__)

STRATEGIES = ("static", "tdro", "doremi", "groupdro", "infdds", "multidds", "idro")


def build_strategy(config: TrainConfig, collection_names: list[str],
                   collection_weights: list[float | None] | None = None) -> Strategy:
    """The strategy for ``config.strategy`` (``transfer`` + ``weights_file`` wrap learned weights;
    ``collection_weights``: the collections' ``weight:`` keys, used by ``--mixture file`` without a file)."""
    name = config.strategy.lower()
    if config.transfer:
        if name != "static":
            raise ConfigError(f"--transfer applies learned weights to static training, not to strategy '{name}'.",
                              fix="drop --strategy or --transfer.")
        if not config.weights_file:
            raise ConfigError("--transfer needs --weights-file (a weights.json from `drmix mixture optimize`).",
                              fix="add --weights-file RUN/weights.json.")
        from drmix.mixture.transfer import build_transfer_strategy

        return build_transfer_strategy(config.weights_file, config.transfer, collection_names)
    if name == "static":
        if config.mixture == "file":
            return StaticStrategy(file_mixture_weights(config.weights_file, collection_names, collection_weights))
        if any(w is not None for w in collection_weights or ()):
            log.warning("the collections' weight: keys are used only with --mixture file; mixing %s instead",
                        config.mixture)
        return StaticStrategy(scheme=config.mixture, temperature=config.mixture_temperature)
    if name in ("tdro", "doremi", "groupdro"):
        from drmix.mixture.dro import dro_strategy_from_options

        return dro_strategy_from_options(name, config.tdro)
    if name in ("infdds", "multidds"):
        from drmix.mixture.influence import build_influence_strategy

        return build_influence_strategy(name, config.infdds, config.seed, batch_size=config.batch_size)
    if name == "idro":
        from drmix.mixture.idro import build_idro_strategy

        return build_idro_strategy(config.idro, config.seed)
    raise ConfigError(f"unknown strategy '{config.strategy}'.", fix=f"use one of: {', '.join(STRATEGIES)}.")
