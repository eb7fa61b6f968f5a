"""free_ports: distinct ports, chosen while all are held (sequential picks can repeat one)."""
from chaosbench.services.ports import free_ports, port_is_free


def test_free_ports_are_distinct_and_free():
    for _ in range(50):
        ports = free_ports(6)
        assert len(set(ports)) == 6
        assert all(port_is_free("127.0.0.1", p) for p in ports)
