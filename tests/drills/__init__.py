"""On-call drills (issue 20): real ``ckptctl recover`` processes, real jobs, real Slurm."""
