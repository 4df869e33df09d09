package platform

import (
	"fmt"
	"net"
	"strconv"
)

// instancePortStep is how far apart a cell's instances' ports are: instance
// i of a cell on :7081 listens on :7081+100·i (cell-a's second on :7181).
const instancePortStep = 100

// Instance is one orchestrator process of a cell.
type Instance struct {
	// Name is its process name and instance ID: the cell ID for the
	// first, <cell>-<n> for the n-th after it (cell-a, cell-a-2).
	Name string
	Addr string
}

// Instances are cell's instances on a platform of cfg.
func (c Config) instances(cell CellSpec) []Instance {
	n := max(c.CellInstances, 1)
	out := make([]Instance, 0, n)
	for i := range n {
		addr, err := instanceAddr(cell.Addr, i)
		if err != nil {
			addr = "" // validate reports it
		}
		out = append(out, Instance{Name: instanceName(cell.ID, i), Addr: addr})
	}
	return out
}

// Instances are cell's running instances' names and addresses.
func (p *Platform) Instances(cell string) []Instance {
	for _, c := range p.cfg.Cells {
		if c.ID == cell {
			return p.cfg.instances(c)
		}
	}
	return nil
}

func instanceName(cell string, i int) string {
	if i == 0 {
		return cell
	}
	return cell + "-" + strconv.Itoa(i+1)
}

func instanceAddr(addr string, i int) (string, error) {
	if i == 0 {
		return addr, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return "", err
	}
	if n+instancePortStep*i > 65535 {
		return "", fmt.Errorf("instance %d of %s: port %d out of range", i+1, addr, n+instancePortStep*i)
	}
	return net.JoinHostPort(host, strconv.Itoa(n+instancePortStep*i)), nil
}
