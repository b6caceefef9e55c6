"""AWS drivers implementing ccm.contracts."""
