#!/usr/bin/env python3
"""An app of the real Python kubernetes client: loads the kubeconfig (whose user runs tokenbroker's exec plugin)
and lists the pods of `default`; prints the first pod's name.

    kube_app.py KUBECONFIG
"""

import sys

from kubernetes import client, config


def main() -> None:
    config.load_kube_config(config_file=sys.argv[1])
    pods = client.CoreV1Api().list_namespaced_pod("default")
    print(pods.items[0].metadata.name)


if __name__ == "__main__":
    main()
