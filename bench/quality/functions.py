"""This file holds the test functions of the quality suite (bench/quality/run.py): each is a
box of parameters, an objective to MINIMIZE and its known minimum, so that simple regret is
best value found minus the minimum. Standard definitions (Surjanovic & Bingham, "Virtual
Library of Simulation Experiments"); the embedded and mixed variants are built here.

Which functions may be used to choose constants (TUNING; TUNING2: multi-basin functions
added in session 12 to design rules for leaving a wrong basin; TUNING3: mixed spaces, int
and categorical parameters beside floats, added in session 18 when the held-out mixed
functions were found far behind TPE under noise; TUNING4: a mixed space whose best choice
is not the best on average, added in session 39) and which are only reported (HELD_OUT,
and HELD_OUT2: a fresh set added in session 13, with its own seeds, because HELD_OUT had
been looked at in every session since the sixth; HELD_OUT3: two mixed spaces added in
session 38 to judge a categorical default on functions it was not designed on; HELD_OUT4:
two more, written before the next such rule) is fixed here, as the quality protocol
(docs/REFERENCES.md) asks: never tune on a held-out one.
"""
import math

HARTMANN3_A = [[3.0, 10, 30], [0.1, 10, 35], [3.0, 10, 30], [0.1, 10, 35]]
HARTMANN3_P = [[0.3689, 0.1170, 0.2673], [0.4699, 0.4387, 0.7470],
               [0.1091, 0.8732, 0.5547], [0.0381, 0.5743, 0.8828]]
HARTMANN6_A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
               [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
HARTMANN6_P = [[0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
               [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
               [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
               [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381]]
HARTMANN_ALPHA = [1.0, 1.2, 3.0, 3.2]


def hartmann(x, A, P):
    return -sum(a * math.exp(-sum(Ai * (xi - pi) ** 2 for Ai, xi, pi in zip(Ar, x, Pr)))
                for a, Ar, Pr in zip(HARTMANN_ALPHA, A, P))


def branin(x1, x2):
    b, c, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1 ** 2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def styblinski_tang(xs):
    return sum(x ** 4 - 16 * x ** 2 + 5 * x for x in xs) / 2


SHEKEL_C = [[4, 1, 8, 6, 3, 2, 5, 8, 6, 7], [4, 1, 8, 6, 7, 9, 3, 1, 2, 3.6],
            [4, 1, 8, 6, 3, 2, 5, 8, 6, 7], [4, 1, 8, 6, 7, 9, 3, 1, 2, 3.6]]
SHEKEL_BETA = [0.1 * b for b in (1, 2, 2, 4, 4, 6, 3, 7, 5, 5)]


def shekel10(x):
    return -sum(1.0 / (sum((x[j] - SHEKEL_C[j][i]) ** 2 for j in range(4)) + SHEKEL_BETA[i])
                for i in range(10))


def levy(xs):
    w = [1 + (x - 1) / 4 for x in xs]
    body = sum((wi - 1) ** 2 * (1 + 10 * math.sin(math.pi * wi + 1) ** 2) for wi in w[:-1])
    return (math.sin(math.pi * w[0]) ** 2 + body
            + (w[-1] - 1) ** 2 * (1 + math.sin(2 * math.pi * w[-1]) ** 2))


def ackley(xs):
    n = len(xs)
    return (-20.0 * math.exp(-0.2 * math.sqrt(sum(x * x for x in xs) / n))
            - math.exp(sum(math.cos(2 * math.pi * x) for x in xs) / n) + 20.0 + math.e)


def michalewicz(xs, m=10):
    return -sum(math.sin(x) * math.sin((i + 1) * x * x / math.pi) ** (2 * m)
                for i, x in enumerate(xs))


def rastrigin(xs):
    return 10.0 * len(xs) + sum(x * x - 10.0 * math.cos(2 * math.pi * x) for x in xs)


# max over [-500, 500] of x sin(sqrt|x|), at x = 420.9687488 (the library's 418.9829 is this
# rounded; with it f at the minimizer would be 5e-5, not 0)
SCHWEFEL_PEAK = 418.98288727243295


def schwefel(xs):
    return sum(SCHWEFEL_PEAK - x * math.sin(math.sqrt(abs(x))) for x in xs)


def goldstein_price(x1, x2):
    a = 1 + (x1 + x2 + 1) ** 2 * (19 - 14 * x1 + 3 * x1 ** 2 - 14 * x2 + 6 * x1 * x2
                                  + 3 * x2 ** 2)
    b = 30 + (2 * x1 - 3 * x2) ** 2 * (18 - 32 * x1 + 12 * x1 ** 2 + 48 * x2 - 36 * x1 * x2
                                       + 27 * x2 ** 2)
    return a * b


def powell(xs):
    return sum((xs[i] + 10 * xs[i + 1]) ** 2 + 5 * (xs[i + 2] - xs[i + 3]) ** 2
               + (xs[i + 1] - 2 * xs[i + 2]) ** 4 + 10 * (xs[i] - xs[i + 3]) ** 4
               for i in range(0, len(xs), 4))


def dixon_price(xs):
    return (xs[0] - 1) ** 2 + sum((i + 1) * (2 * xs[i] ** 2 - xs[i - 1]) ** 2
                                  for i in range(1, len(xs)))


def colville(x1, x2, x3, x4):
    return (100 * (x1 ** 2 - x2) ** 2 + (x1 - 1) ** 2 + (x3 - 1) ** 2 + 90 * (x3 ** 2 - x4) ** 2
            + 10.1 * ((x2 - 1) ** 2 + (x4 - 1) ** 2) + 19.8 * (x2 - 1) * (x4 - 1))


def six_hump_camel(x1, x2):
    return (4 - 2.1 * x1 ** 2 + x1 ** 4 / 3) * x1 ** 2 + x1 * x2 + (-4 + 4 * x2 ** 2) * x2 ** 2


# The two tuning-like functions of HELD_OUT2 are built here, not taken from the library: a
# sum of squares in the log-scaled and integer parameters plus a nonnegative offset per
# categorical choice, the offset 0 for one choice only, so the minimum is 0 by construction.
# Interactions make them non-separable, as real tuning surfaces are: the best learning rate
# depends on the optimizer and the depth, the best dropout on the depth, the best number of
# trees on the learning rate (a valley along lr * n = 10) and the best depth on the booster.
TRAIN_OPTIMIZERS = {"adam": (-3.0, 0.0), "sgd": (-1.5, 0.15), "rmsprop": (-3.5, 0.1),
                    "adagrad": (-2.0, 0.3)}  # (best log10 lr at 4 layers, loss offset)


def train_loss(p):
    best_lr, offset = TRAIN_OPTIMIZERS[p["optimizer"]]
    layers = p["layers"]
    return (offset + 0.5 * (math.log10(p["lr"]) - best_lr + 0.1 * (layers - 4)) ** 2
            + 0.02 * (layers - 4) ** 2 + 4.0 * (p["dropout"] - 0.05 * layers) ** 2
            + 0.05 * (math.log10(p["weight_decay"]) + 4.0) ** 2)


BOOSTERS = {"gbtree": (6, 0.0), "dart": (4, 0.05), "linear": (None, 0.4)}  # (best depth, offset)


def boosting_loss(p):
    best_depth, offset = BOOSTERS[p["booster"]]
    log_lr, log_n = math.log10(p["learning_rate"]), math.log10(p["n_trees"])
    depth = 0.0 if best_depth is None else 0.01 * (p["max_depth"] - best_depth) ** 2
    return (offset + (log_lr + log_n - 1.0) ** 2 + 0.1 * (log_n - 2.0) ** 2 + depth
            + 2.0 * (p["subsample"] - 0.8) ** 2)


# HELD_OUT3 (session 38): two more tuning-like mixed spaces, written before any run on them
# to judge categorical defaults on functions no rule was designed on (they decided against
# a gated term, docs/BENCHMARKS.md, thirty-eighth session). As
# above, a sum of squares plus a nonnegative offset per choice (0 for one choice), so the
# minimum is 0 by construction. svm_mixed: the best C and gamma depend on the kernel (and
# interact), degree matters for poly only, and a second categorical (shrinking) costs a
# little. forest_mixed: the best max_features depends on bootstrap, and the criterion's
# effect (0.005) is far below a noise of a tenth of the mean gap.
SVM_KERNELS = {"rbf": (1.0, -2.0, 0.0), "poly": (0.0, -1.0, 0.04),
               "sigmoid": (-1.0, -3.0, 0.12), "linear": (0.5, None, 0.08)}
# (best log10 C, best log10 gamma (None: gamma unused), offset)


def svm_loss(p):
    best_c, best_g, offset = SVM_KERNELS[p["kernel"]]
    a = math.log10(p["C"]) - best_c
    b = 0.0 if best_g is None else math.log10(p["gamma"]) - best_g
    degree = 0.03 * (p["degree"] - 3) ** 2 if p["kernel"] == "poly" else 0.0
    return (offset + 0.3 * a * a + 0.4 * b * b + 0.2 * a * b + degree
            + (0.01 if p["shrinking"] == "off" else 0.0))


FOREST_BOOTSTRAP = {"yes": (0.3, 0.0), "no": (0.5, 0.03)}  # (best max_features, offset)
FOREST_CRITERIA = {"gini": 0.0, "entropy": 0.005, "log_loss": 0.005}


def forest_loss(p):
    best_mf, offset = FOREST_BOOTSTRAP[p["bootstrap"]]
    return (offset + FOREST_CRITERIA[p["criterion"]]
            + 0.1 * (math.log10(p["n_estimators"]) - math.log10(300)) ** 2
            + 1.5 * (p["max_features"] - best_mf) ** 2
            + 0.05 * (math.log2(p["min_samples_leaf"]) - 2.0) ** 2)


# HELD_OUT4 (session 38): two more mixed spaces, written before the rule they first judged
# (an additive categorical term over only the choices the noise hides, not landed) was
# built, and before any run on them. Same construction (minimum 0). nn_mixed: the best learning rate
# depends on the activation and the batch size; norm's effects are small. gbm_mixed: the
# best feature fraction depends on the objective; bagging costs little.
NN_ACTIVATIONS = {"relu": (-3.0, 0.0), "gelu": (-3.0, 0.01), "tanh": (-2.0, 0.06),
                  "sigmoid": (-2.0, 0.2)}  # (best log10 lr at batch 64, offset)
NN_NORMS = {"batch": 0.0, "layer": 0.005, "none": 0.04}


def nn_loss(p):
    best_lr, offset = NN_ACTIVATIONS[p["activation"]]
    b = math.log2(p["batch_size"]) - 6.0
    return (offset + NN_NORMS[p["norm"]]
            + 0.3 * (math.log10(p["lr"]) - best_lr - 0.1 * b) ** 2 + 0.02 * b * b
            + 2.0 * (p["warmup"] - 0.1) ** 2)


GBM_OBJECTIVES = {"huber": (0.7, 0.0), "l2": (0.7, 0.02), "l1": (0.5, 0.05),
                  "fair": (0.6, 0.03)}  # (best feature fraction, offset)


def gbm_loss(p):
    best_ff, offset = GBM_OBJECTIVES[p["objective"]]
    return (offset + (0.008 if p["bagging"] == "off" else 0.0)
            + 0.05 * (math.log2(p["num_leaves"]) - 5.0) ** 2
            + 1.0 * (p["feature_fraction"] - best_ff) ** 2
            + 0.1 * (math.log10(p["lambda_l2"]) + 1.0) ** 2)


# TUNING4 (session 39): a mixed space built on a known weakness, to design a rule on. The
# choice best on average over the floats ("wide", a broad bowl, 0.2 at its bottom) is not
# the choice of the optimum ("sharp", a well to 0 of sd 0.25, 0.72 on average; "flat" is
# 0.6 everywhere), the shape of an SVM's kernel choice (rbf needs the right gamma, linear
# is good for any). A GP whose lengthscales every choice shares sees "sharp" as bad
# everywhere after a few trials away from its well (docs/BENCHMARKS.md, thirty-ninth
# session: 15 of 20 runs ended on "wide" under noise, Optuna TPE 9 of 10).
def choice_trap_loss(p):
    x1, x2 = p["x0"], p["x1"]
    if p["model"] == "wide":
        return 0.2 + 0.5 * ((x1 - 0.7) ** 2 + (x2 - 0.3) ** 2)
    if p["model"] == "sharp":
        return 1.0 - math.exp(-((x1 - 0.25) ** 2 + (x2 - 0.75) ** 2) / (2 * 0.25 ** 2))
    return 0.6


def floats(names, low, high):
    return [{"name": n, "type": "float", "low": low, "high": high} for n in names]


def unit(d, prefix="x"):
    return floats([f"{prefix}{i}" for i in range(d)], 0.0, 1.0)


def vec(p, d, prefix="x"):
    return [p[f"{prefix}{i}"] for i in range(d)]


CHOICE_COST = {"red": 0.0, "green": 1.0, "blue": 2.0}
# Tuning-set choices: the cheapest is neither the first nor the last, so an ordinal reading
# of the list is no help.
KERNEL_COST = {"rbf": 0.5, "matern52": 0.0, "matern32": 0.25, "linear": 1.0}
SOLVER_COST = {"sgd": 1.0, "lbfgs": 0.0, "adam": 0.3}


def rosenbrock(xs):
    return sum(100 * (b - a ** 2) ** 2 + (1 - a) ** 2 for a, b in zip(xs, xs[1:]))

FUNCTIONS = {
    "branin": dict(
        params=floats(["x1"], -5.0, 10.0) + floats(["x2"], 0.0, 15.0),
        f=lambda p: branin(p["x1"], p["x2"]), fmin=0.397887357729738),
    "hartmann3": dict(
        params=unit(3), f=lambda p: hartmann(vec(p, 3), HARTMANN3_A, HARTMANN3_P),
        fmin=-3.86278214782076),
    "hartmann6": dict(
        params=unit(6), f=lambda p: hartmann(vec(p, 6), HARTMANN6_A, HARTMANN6_P),
        fmin=-3.32236801141551),
    "rosenbrock4": dict(
        params=floats([f"x{i}" for i in range(4)], -2.048, 2.048),
        f=lambda p: rosenbrock(vec(p, 4)), fmin=0.0),
    "styblinski8": dict(
        params=floats([f"x{i}" for i in range(8)], -5.0, 5.0),
        f=lambda p: styblinski_tang(vec(p, 8)), fmin=-39.16616570377142 * 8),
    # 10 parameters, only x0..x3 matter (Styblinski-Tang-4): finding the inactive ones is
    # what fitted ARD lengthscales are for.
    "inactive10": dict(
        params=floats([f"x{i}" for i in range(10)], -5.0, 5.0),
        f=lambda p: styblinski_tang(vec(p, 4)), fmin=-39.16616570377142 * 4),
    # floats + an int + a categorical (unordered; cost by name, not by position).
    "mixed": dict(
        params=floats(["x1"], -5.0, 10.0) + floats(["x2"], 0.0, 15.0)
        + [{"name": "k", "type": "int", "low": 0, "high": 6},
           {"name": "c", "type": "categorical", "choices": ["blue", "red", "green"]}],
        f=lambda p: branin(p["x1"], p["x2"]) + 2.0 * abs(p["k"] - 3) + 3.0 * CHOICE_COST[p["c"]],
        fmin=0.397887357729738),
    # Added in session 7 as fresh held-out functions, when Styblinski-Tang-8 moved to the
    # tuning set (it had been examined while choosing the output warping).
    "levy6": dict(params=floats([f"x{i}" for i in range(6)], -10.0, 10.0),
                  f=lambda p: levy(vec(p, 6)), fmin=0.0),
    "shekel4": dict(params=floats([f"x{i}" for i in range(4)], 0.0, 10.0),
                    f=lambda p: shekel10(vec(p, 4)), fmin=-10.53644315348353),
    "hartmann6_in20": dict(
        params=unit(20), f=lambda p: hartmann([p[f"x{i}"] for i in (3, 7, 11, 12, 16, 19)],
                                              HARTMANN6_A, HARTMANN6_P),
        fmin=-3.32236801141551),
    "hartmann6_in50": dict(
        params=unit(50), f=lambda p: hartmann([p[f"x{i}"] for i in (4, 13, 22, 31, 40, 49)],
                                              HARTMANN6_A, HARTMANN6_P),
        fmin=-3.32236801141551),
    # Session 12: multi-basin tuning functions (TUNING2), standard domains and minima from
    # Surjanovic & Bingham; the Michalewicz-5 minimum checked by differential evolution
    # (scipy, 4 seeds: -4.6876582). Not Shekel / Levy / Hartmann variants: those are
    # held out.
    "ackley5": dict(params=floats([f"x{i}" for i in range(5)], -32.768, 32.768),
                    f=lambda p: ackley(vec(p, 5)), fmin=0.0),
    "michalewicz5": dict(params=floats([f"x{i}" for i in range(5)], 0.0, math.pi),
                         f=lambda p: michalewicz(vec(p, 5)), fmin=-4.687658179087901),
    "rastrigin4": dict(params=floats([f"x{i}" for i in range(4)], -5.12, 5.12),
                       f=lambda p: rastrigin(vec(p, 4)), fmin=0.0),
    "schwefel4": dict(params=floats([f"x{i}" for i in range(4)], -500.0, 500.0),
                      f=lambda p: schwefel(vec(p, 4)), fmin=0.0),
    # Session 13: HELD_OUT2, a fresh held-out set (nothing tuned on it; see the module
    # docstring). Domains and minima from Surjanovic & Bingham's Virtual Library of
    # Simulation Experiments (sfu.ca/~ssurjano), one page per function:
    # Goldstein-Price (goldpr), x in [-2, 2]^2, f(0, -1) = 3.
    "goldstein_price": dict(params=floats(["x1", "x2"], -2.0, 2.0),
                            f=lambda p: goldstein_price(p["x1"], p["x2"]), fmin=3.0),
    # Powell (powell), d = 8, x in [-4, 5]^d, f(0) = 0.
    "powell8": dict(params=floats([f"x{i}" for i in range(8)], -4.0, 5.0),
                    f=lambda p: powell(vec(p, 8)), fmin=0.0),
    # Dixon-Price (dixonpr), d = 6, x in [-10, 10]^d, f = 0 at x_i = 2^-((2^i - 2) / 2^i),
    # i = 1..d.
    "dixon_price6": dict(params=floats([f"x{i}" for i in range(6)], -10.0, 10.0),
                         f=lambda p: dixon_price(vec(p, 6)), fmin=0.0),
    # Colville (colville), x in [-10, 10]^4, f(1, 1, 1, 1) = 0.
    "colville4": dict(params=floats([f"x{i}" for i in range(4)], -10.0, 10.0),
                      f=lambda p: colville(*vec(p, 4)), fmin=0.0),
    # Six-hump camel (camel6), x1 in [-3, 3], x2 in [-2, 2], two global minima
    # f(+-0.0898, -+0.7126) = -1.0316 (fmin here to full precision, checked by BFGS and
    # Nelder-Mead from scipy), embedded as x3 and x10 of 16 parameters; the 14 others are
    # inactive, in [-2, 2].
    "camel_in16": dict(
        params=[q if q["name"] != "x3" else dict(q, low=-3.0, high=3.0)
                for q in floats([f"x{i}" for i in range(16)], -2.0, 2.0)],
        f=lambda p: six_hump_camel(p["x3"], p["x10"]), fmin=-1.0316284534898774),
    # A network-training-like space: log-scaled learning rate and weight decay, an int
    # depth, a float dropout and a 4-choice optimizer. Minimum 0 at adam, lr 1e-3, 4 layers,
    # dropout 0.2, weight decay 1e-4 (construction above).
    "train_mixed": dict(
        params=[{"name": "lr", "type": "float", "low": 1e-5, "high": 1e-1, "log": True},
                {"name": "weight_decay", "type": "float", "low": 1e-6, "high": 1e-2,
                 "log": True},
                {"name": "layers", "type": "int", "low": 1, "high": 8},
                {"name": "dropout", "type": "float", "low": 0.0, "high": 0.6},
                {"name": "optimizer", "type": "categorical",
                 "choices": ["sgd", "adam", "rmsprop", "adagrad"]}],
        f=train_loss, fmin=0.0),
    # A gradient-boosting-like space: log-scaled learning rate, a log-scaled int number of
    # trees, an int depth, a float subsample and a 3-choice booster. Minimum 0 at gbtree,
    # learning rate 0.1, 100 trees, depth 6, subsample 0.8 (construction above).
    "boosting_mixed": dict(
        params=[{"name": "learning_rate", "type": "float", "low": 1e-3, "high": 0.5,
                 "log": True},
                {"name": "n_trees", "type": "int", "low": 10, "high": 1000, "log": True},
                {"name": "max_depth", "type": "int", "low": 1, "high": 12},
                {"name": "subsample", "type": "float", "low": 0.4, "high": 1.0},
                {"name": "booster", "type": "categorical",
                 "choices": ["dart", "linear", "gbtree"]}],
        f=boosting_loss, fmin=0.0),
    # HELD_OUT3: minimum 0 at rbf, C 10, gamma 0.01, shrinking on (any degree).
    "svm_mixed": dict(
        params=[{"name": "C", "type": "float", "low": 1e-3, "high": 1e3, "log": True},
                {"name": "gamma", "type": "float", "low": 1e-4, "high": 10.0, "log": True},
                {"name": "kernel", "type": "categorical",
                 "choices": ["rbf", "poly", "sigmoid", "linear"]},
                {"name": "degree", "type": "int", "low": 2, "high": 5},
                {"name": "shrinking", "type": "categorical", "choices": ["on", "off"]}],
        f=svm_loss, fmin=0.0),
    # HELD_OUT3: minimum 0 at 300 trees, max_features 0.3, 4 samples per leaf, gini,
    # bootstrap.
    "forest_mixed": dict(
        params=[{"name": "n_estimators", "type": "int", "low": 10, "high": 1000, "log": True},
                {"name": "max_features", "type": "float", "low": 0.05, "high": 1.0},
                {"name": "min_samples_leaf", "type": "int", "low": 1, "high": 32,
                 "log": True},
                {"name": "criterion", "type": "categorical",
                 "choices": ["gini", "entropy", "log_loss"]},
                {"name": "bootstrap", "type": "categorical", "choices": ["yes", "no"]}],
        f=forest_loss, fmin=0.0),
    # HELD_OUT4: minimum 0 at lr 1e-3, batch 64, relu, batch norm, warmup 0.1.
    "nn_mixed": dict(
        params=[{"name": "lr", "type": "float", "low": 1e-5, "high": 1e-1, "log": True},
                {"name": "batch_size", "type": "int", "low": 16, "high": 512, "log": True},
                {"name": "activation", "type": "categorical",
                 "choices": ["tanh", "relu", "sigmoid", "gelu"]},
                {"name": "norm", "type": "categorical", "choices": ["none", "batch", "layer"]},
                {"name": "warmup", "type": "float", "low": 0.0, "high": 0.3}],
        f=nn_loss, fmin=0.0),
    # HELD_OUT4: minimum 0 at 32 leaves, feature fraction 0.7, huber, bagging, lambda 0.1.
    "gbm_mixed": dict(
        params=[{"name": "num_leaves", "type": "int", "low": 4, "high": 256, "log": True},
                {"name": "feature_fraction", "type": "float", "low": 0.3, "high": 1.0},
                {"name": "objective", "type": "categorical",
                 "choices": ["l2", "l1", "huber", "fair"]},
                {"name": "bagging", "type": "categorical", "choices": ["off", "on"]},
                {"name": "lambda_l2", "type": "float", "low": 1e-3, "high": 10.0, "log": True}],
        f=gbm_loss, fmin=0.0),
    # TUNING4: minimum 0 at sharp, x = (0.25, 0.75); the best of wide is 0.2.
    "choice_trap": dict(
        params=unit(2) + [{"name": "model", "type": "categorical",
                           "choices": ["flat", "wide", "sharp"]}],
        f=choice_trap_loss, fmin=0.0),
    # Session 18, TUNING3 (mixed spaces for tuning): Hartmann-3 plus 0.1 per step of an int
    # away from 6 plus a 4-choice cost; minimum at n = 6, matern52 and Hartmann-3's
    # minimizer, whose value with these constants (Nelder-Mead, then BFGS) is 2.4e-6 above
    # the -3.86278214782076 that "hartmann3" states.
    "hartmann3_mixed": dict(
        params=unit(3) + [{"name": "n", "type": "int", "low": 1, "high": 9},
                          {"name": "kernel", "type": "categorical",
                           "choices": ["rbf", "matern52", "matern32", "linear"]}],
        f=lambda p: (hartmann(vec(p, 3), HARTMANN3_A, HARTMANN3_P) + 0.1 * abs(p["n"] - 6)
                     + KERNEL_COST[p["kernel"]]),
        fmin=-3.862779787332663),
    # Rosenbrock over a float, a log-scaled float and an int (minimum 0 at 1, 1, 1) plus a
    # 3-choice cost (lbfgs free).
    "rosenbrock_mixed": dict(
        params=[{"name": "a", "type": "float", "low": -2.0, "high": 2.0},
                {"name": "b", "type": "float", "low": 0.01, "high": 10.0, "log": True},
                {"name": "c", "type": "int", "low": -2, "high": 3},
                {"name": "solver", "type": "categorical", "choices": ["sgd", "lbfgs", "adam"]}],
        f=lambda p: rosenbrock([p["a"], p["b"], p["c"]]) + SOLVER_COST[p["solver"]],
        fmin=0.0),
}

TUNING = ["branin", "hartmann3", "rosenbrock4", "styblinski8"]
TUNING2 = ["ackley5", "michalewicz5", "rastrigin4", "schwefel4"]
TUNING3 = ["hartmann3_mixed", "rosenbrock_mixed"]
TUNING_SEEDS = [1, 2, 3, 4, 5]
HELD_OUT = ["hartmann6", "inactive10", "mixed", "levy6", "shekel4", "hartmann6_in20",
            "hartmann6_in50"]
HELD_OUT_SEEDS = [101, 102, 103, 104, 105]
HELD_OUT2 = ["goldstein_price", "powell8", "dixon_price6", "colville4", "camel_in16",
             "train_mixed", "boosting_mixed"]
HELD_OUT2_SEEDS = list(range(201, 211))
HELD_OUT3 = ["svm_mixed", "forest_mixed"]
HELD_OUT3_SEEDS = list(range(301, 311))
HELD_OUT4 = ["nn_mixed", "gbm_mixed"]
HELD_OUT4_SEEDS = list(range(401, 411))
TUNING4 = ["choice_trap"]

# Every set with its seeds, by the name run.py's --set takes. Each function is in one set.
SETS = {"tuning": (TUNING, TUNING_SEEDS), "tuning2": (TUNING2, TUNING_SEEDS),
        "tuning3": (TUNING3, TUNING_SEEDS),
        "held-out": (HELD_OUT, HELD_OUT_SEEDS), "held-out2": (HELD_OUT2, HELD_OUT2_SEEDS),
        "held-out3": (HELD_OUT3, HELD_OUT3_SEEDS),
        "held-out4": (HELD_OUT4, HELD_OUT4_SEEDS), "tuning4": (TUNING4, TUNING_SEEDS)}
