#!/bin/sh
# $1 = controller | compute. munge key and slurm.conf come from /etc/slurm-shared (bind mount).
set -e
install -o munge -g munge -m 0400 /etc/slurm-shared/munge.key /etc/munge/munge.key
cp /etc/slurm-shared/slurm.conf /etc/slurm/slurm.conf
mkdir -p /run/munge /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
chown munge:munge /run/munge
runuser -u munge -- /usr/sbin/munged
case "$1" in
  controller) exec /usr/sbin/slurmctld -D -i ;;
  compute) exec /usr/sbin/slurmd -D -N "$(hostname)" ;;
  *) exec "$@" ;;
esac
