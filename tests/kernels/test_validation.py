"""The shared argument checks (kernels/_validation.py) and their one error type,
InvalidParameterError, used by the kernels, proposals, combiners and diagnostics."""

import math

import numpy as np
import pytest

import pymc_subsample as pms
from pymc_subsample.kernels import _validation as v
from pymc_subsample.kernels._validation import (
    InvalidParameterError,
    check_bytes,
    check_callable,
    check_choice,
    check_epsilon,
    check_finite_positive,
    check_float,
    check_generator,
    check_int,
    check_positive,
    check_positive_int,
    check_real,
    check_share,
)


# --------------------------------------------------------------------------------------
# the error type
# --------------------------------------------------------------------------------------
def test_invalid_parameter_error_is_a_value_error_and_a_type_error():
    assert issubclass(InvalidParameterError, ValueError)
    assert issubclass(InvalidParameterError, TypeError)
    for caught in (ValueError, TypeError):
        with pytest.raises(caught):
            check_positive_int("n", "ten")
        with pytest.raises(caught):
            check_positive_int("n", 0)


def test_invalid_parameter_error_is_exported():
    assert pms.InvalidParameterError is InvalidParameterError
    assert "InvalidParameterError" in pms.__all__


@pytest.mark.parametrize(
    "call",
    [
        lambda: check_int("n", 0, 1),
        lambda: check_int("n", "1", 1),
        lambda: check_positive_int("n", 2.5),
        lambda: check_real("x", 2.0, 0.0, 1.0),
        lambda: check_real("x", "a", 0.0, 1.0),
        lambda: check_float("x", None),
        lambda: check_positive("x", 0.0),
        lambda: check_share("x", 1.5),
        lambda: check_bytes("m", -1),
        lambda: check_epsilon(0.5),
        lambda: check_choice("c", "z", ("a", "b")),
        lambda: check_callable("f", 3),
        lambda: check_generator("rng", 0),
        lambda: check_finite_positive("s", "x"),
        lambda: check_finite_positive("s", -1.0),
    ],
)
def test_every_check_raises_invalid_parameter_error(call):
    with pytest.raises(InvalidParameterError):
        call()


def test_every_public_check_is_listed():
    checks = {name for name in dir(v) if name.startswith("check_")}
    assert checks <= set(v.__all__)


# --------------------------------------------------------------------------------------
# the helpers one by one
# --------------------------------------------------------------------------------------
def test_check_positive_int():
    assert check_positive_int("n", 3) == 3 and type(check_positive_int("n", 3)) is int
    assert check_positive_int("n", np.int64(7)) == 7
    assert check_positive_int("n", 10.0) == 10  # an integral float, unless strict
    with pytest.raises(InvalidParameterError, match=r"n must be a positive integer, got 10\.0"):
        check_positive_int("n", 10.0, strict=True)
    for bad in (0, -3, 2.5, True, np.bool_(True), "5", None, math.nan, math.inf):
        with pytest.raises(InvalidParameterError, match="n must be a positive integer"):
            check_positive_int("n", bad)
    with pytest.raises(InvalidParameterError, match=r"The 'n' parameter of f must be an int "
                                                    r"in the range \[1, inf\)"):
        check_positive_int("n", 0, owner="f")


def test_label_and_what_shape_the_message():
    with pytest.raises(InvalidParameterError,
                       match=r"^g: n must be the number of rows N, got 0\.$"):
        check_positive_int("n", 0, label="g: n", what="the number of rows N")
    with pytest.raises(InvalidParameterError, match=r"^x must be a share of steps, got 2\.0\.$"):
        check_share("x", 2.0, what="a share of steps")


def test_check_float_keeps_nan_and_infinities():
    assert check_float("x", "1.5") == 1.5
    assert math.isnan(check_float("x", math.nan))
    assert check_float("x", -math.inf) == -math.inf
    with pytest.raises(InvalidParameterError, match="x must be a float, got 'a'"):
        check_float("x", "a")
    with pytest.raises(InvalidParameterError, match="x must be a float"):
        check_float("x", "1.5", strict=True)


def test_check_positive():
    assert check_positive("h", 0.5) == 0.5
    assert check_positive("h", np.float32(2.0)) == 2.0
    assert check_positive("h", math.inf, finite=False) == math.inf
    for bad in (0.0, -1.0, math.nan, math.inf, None, "x"):
        with pytest.raises(InvalidParameterError, match="h must be a finite positive number"):
            check_positive("h", bad)
    with pytest.raises(InvalidParameterError, match="h must be a finite positive number"):
        check_positive("h", True, strict=True)
    with pytest.raises(InvalidParameterError, match=r"h must be a positive number \(inf allowed"):
        check_positive("h", 0.0, finite=False)


def test_check_share():
    assert check_share("d", 0) == 0.0 and check_share("d", 1) == 1.0
    assert check_share("d", 0.25) == 0.25
    for bad in (-0.1, 1.1, math.nan, "x"):
        with pytest.raises(InvalidParameterError, match=r"d must be a number in \[0, 1\]"):
            check_share("d", bad)
    with pytest.raises(InvalidParameterError, match="d must be"):
        check_share("d", True, strict=True)


def test_check_bytes():
    assert check_bytes("max_memory", None) is None
    assert check_bytes("max_memory", 8 * 2**30) == 8.0 * 2**30
    for bad in (0, -1.0, math.inf, True, "1GB"):
        with pytest.raises(InvalidParameterError,
                           match=r"max_memory must be a positive number of bytes \(e\.g\. "
                                 r"8 \* 2\*\*30 for 8 GiB\) or None"):
            check_bytes("max_memory", bad)
    with pytest.raises(InvalidParameterError, match=r"GiB\), got None"):
        check_bytes("max_memory", None, allow_none=False)


def test_check_choice():
    assert check_choice("c", "a", ("a", "b")) == "a"
    assert check_choice("c", None, ("a", "b"), allow_none=True) is None
    with pytest.raises(InvalidParameterError, match="c must be 'a' or 'b', got None"):
        check_choice("c", None, ("a", "b"))
    with pytest.raises(InvalidParameterError,
                       match="c must be None or one of 'a', 'b', 'c', got 'z'"):
        check_choice("c", "z", ("a", "b", "c"), allow_none=True)
    # a value that cannot be compared with the choices (an array) is refused cleanly
    with pytest.raises(InvalidParameterError, match="c must be"):
        check_choice("c", np.array([1, 2]), ("a", "b"))


def test_check_callable_and_generator():
    f = lambda rows: rows  # noqa: E731
    assert check_callable("f", f) is f
    with pytest.raises(InvalidParameterError, match=r"f must be callable: f\(rows\) -> ndarray"):
        check_callable("f", 3, signature="f(rows) -> ndarray")
    rng = np.random.default_rng(0)
    assert check_generator("rng", rng) is rng
    with pytest.raises(InvalidParameterError, match=r"rng must be a numpy\.random\.Generator "
                                                    r"\(e\.g\. numpy\.random\.default_rng"):
        check_generator("rng", np.random.RandomState(0))


# --------------------------------------------------------------------------------------
# the modules that use them
# --------------------------------------------------------------------------------------
def test_proposals_raise_invalid_parameter_error():
    from pymc_subsample.proposals import (PCN, Langevin, RandomWalk, SurrogateHMC,
                                          as_proposal, make_proposal)

    cases = [
        (lambda: Langevin(gradient="fast"), "gradient must be None or one of"),
        (lambda: Langevin(batch_size=0), "batch_size must be a positive integer"),
        (lambda: Langevin(precondition="full"), "precondition must be False, True, 'diag'"),
        (lambda: Langevin().setup(2, grad_fn=lambda q, r: q), "n_total must be the number"),
        (lambda: SurrogateHMC(max_steps=0), "max_steps must be a positive integer"),
        (lambda: SurrogateHMC(step_size=[0.1, 0.2]), "step_size must be a positive scalar"),
        (lambda: SurrogateHMC(path_length=-1.0), "path_length must be a finite positive"),
        (lambda: PCN(rho=1.0), r"rho must be a number in \[0, 1\)"),
        (lambda: RandomWalk(target_accept=1.5), r"target_accept must be a number in \(0, 1\)"),
        (lambda: RandomWalk(adapt_kappa=0.5), r"adapt_kappa must be a number in \(0\.5, 1\]"),
        (lambda: RandomWalk(max_scale_factor=0.5), "max_scale_factor must be"),
        (lambda: RandomWalk(cov_start=1), "cov_start must be an integer >= 2"),
        (lambda: RandomWalk(cov_update_interval=0), "cov_update_interval must be a positive"),
        (lambda: RandomWalk().setup(0), "ndim must be a positive integer"),
        (lambda: RandomWalk().setup(2.5), "ndim must be a positive integer"),
        (lambda: make_proposal(3), "make_proposal expects a proposal name"),
        (lambda: as_proposal(None), "No proposal given"),
    ]
    for call, match in cases:
        with pytest.raises(InvalidParameterError, match=match):
            call()


def test_gradient_estimators_raise_invalid_parameter_error():
    from pymc_subsample.kernels.variance.gradient_estimators import (ImportanceEstimator,
                                                            MinibatchEstimator, make_estimator)

    assert MinibatchEstimator(100.0, np.int64(10)).batch_size == 10
    with pytest.raises(InvalidParameterError, match="n_rows must be a positive integer"):
        MinibatchEstimator(True, 10)
    with pytest.raises(InvalidParameterError, match="batch_size must be a positive integer"):
        MinibatchEstimator(100, 2.5)
    with pytest.raises(InvalidParameterError, match=r"defensive must be a number in \[0, 1\]"):
        ImportanceEstimator(10, 5, np.ones(10), defensive=1.5)
    with pytest.raises(InvalidParameterError, match="gradient estimator must be one of"):
        make_estimator("fast", 10, 5)


def test_combiners_raise_invalid_parameter_error():
    from pymc_subsample.consensus.combine import consensus_weighting, semiparametric_product

    rng = np.random.default_rng(0)
    draws = [rng.standard_normal((50, 2)) for _ in range(2)]
    with pytest.raises(InvalidParameterError, match="weights must be 'inverse_covariance' or "
                                                    "'identity'"):
        consensus_weighting(draws, weights="equal")
    with pytest.raises(InvalidParameterError, match="rng must be a numpy.random.Generator"):
        semiparametric_product(draws, rng=0)
    for bad in ("auto", 0.0, math.inf):
        with pytest.raises(InvalidParameterError, match="bandwidth must be 'cv', 'rule' or a "
                                                        "positive finite number"):
            semiparametric_product(draws, rng=rng, bandwidth=bad, draws=5)
    with pytest.raises(InvalidParameterError, match="draws must be a positive integer"):
        semiparametric_product(draws, rng=rng, draws=0)
    with pytest.raises(InvalidParameterError, match="proposals_per_draw must be a positive"):
        semiparametric_product(draws, rng=rng, proposals_per_draw=0.5)
    with pytest.raises(InvalidParameterError, match=r"shard_draws\[1\] has d = 3"):
        consensus_weighting([draws[0], rng.standard_normal((50, 3))])


def test_kernels_raise_invalid_parameter_error():
    from pymc_subsample.kernels.acceptance.austere import austere_test
    from pymc_subsample.kernels.acceptance.barker import barker_test

    rng = np.random.default_rng(0)
    lv = np.zeros(100)
    with pytest.raises(InvalidParameterError, match=r"loglik_diff must be callable: "
                                                    r"loglik_diff\(rows\) -> ndarray"):
        austere_test(rng, 3, 100, 0.0)
    with pytest.raises(InvalidParameterError, match="log_ratio_o1 must be a float"):
        austere_test(rng, lambda r: lv[r], 100, "x")
    with pytest.raises(InvalidParameterError, match=r"log_u must be a float in \[-inf, 0\]"):
        austere_test(rng, lambda r: lv[r], 100, 0.0, log_u=0.5)
    # a NaN log ratio is a valid argument: the test rejects it as non-finite
    assert austere_test(rng, lambda r: lv[r], 100, math.nan).nonfinite
    with pytest.raises(InvalidParameterError, match="'delta' parameter of barker_test"):
        barker_test(rng, lambda r: lv[r], 100, 0.0, delta=0.0)


def test_step_refusals_raise_the_public_error():
    """Every argument refusal in pymc_subsample/steps/ raises InvalidParameterError (or
    another public type of pymc_subsample.errors), never a plain ValueError/TypeError."""
    import ast
    from pathlib import Path

    steps = Path(pms.__file__).parent / "steps"
    for path in sorted(steps.rglob("*.py")):
        plain = [node.lineno for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
                 and getattr(node.exc.func, "id", None) in ("ValueError", "TypeError")]
        assert not plain, (path.name, plain)
