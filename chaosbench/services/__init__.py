"""Real network services the cluster runs next to the trainers: etcd and an S3 endpoint."""
