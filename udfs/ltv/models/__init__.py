"""The LTV models: BG/NBD, Pareto/NBD, Gamma-Gamma, their fitting and identification."""
