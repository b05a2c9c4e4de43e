"""`persalign plan`: a study's counted work, its projected time (this machine's measured rates, a GPU's peak or
its measured rates) and what its design can detect, before any heavy work."""
