"""The route controller: pod-CIDR routes in every cluster-tagged VPC route table (see ccm.route.runtime)."""
