"""Neural-network kernels for the CPU (conv, pools, activations, losses); see funcgrad.nn."""
