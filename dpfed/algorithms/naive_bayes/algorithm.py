"""The naive Bayes registry entry, assembled from the package's halves and options."""
from __future__ import annotations

from dpfed.algorithms.contract import Algorithm
from dpfed.algorithms.naive_bayes.coordinator import NaiveBayesCoordinator
from dpfed.algorithms.naive_bayes.model import evaluate
from dpfed.algorithms.naive_bayes.options import PARAMS, add_arguments, params_from_args
from dpfed.algorithms.naive_bayes.party import NaiveBayesParty, SecureNaiveBayesParty

__all__ = ["ALGORITHMS"]

ALGORITHMS = {"naive-bayes": Algorithm(name="naive-bayes", party=NaiveBayesParty, coordinator=NaiveBayesCoordinator,
                                       evaluate=evaluate, add_arguments=add_arguments,
                                       params_from_args=params_from_args, default_delta=1e-6, params=PARAMS,
                                       secure=SecureNaiveBayesParty,
                                       estimator="dpfed.algorithms.naive_bayes.estimator:DPNaiveBayes")}
