"""The PD-competition policies of Pang et al. 2025: stage policies (``stages``) and their
deployment on a cluster, solvers' plans included (``deploy``)."""
