"""The flat layout's helper module, kept as a re-export for ``from helpers import ...``.

The statistics helpers live in :mod:`pymc_subsample.testing` (shared with the
benchmarks), the models and sampling helpers in ``tests/conftest.py``; new code imports
them from there.
"""

from pymc_subsample.testing import (  # noqa: F401
    batch_means_se,
    ess,
    flat_draws,
    from_datasets,
    from_dict,
    group,
    mcse_mean,
    mcse_mean_sd,
    mcse_sd,
    posterior,
    sample_stats,
)
from tests.conftest import (  # noqa: F401
    hierarchical_logistic,
    run_sample,
    sampler_warnings,
    scalable_mh_accepting_every_proposal,
    steps_per_draw,
)
