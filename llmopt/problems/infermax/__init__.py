"""The InferMax optimal-scheduling CSP (Kim et al. 2025, section 5), its MIP form and its bounds."""
