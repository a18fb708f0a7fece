"""The contract itself: dims and dtypes, the Tensor field, record and batch models, rules, validators."""
