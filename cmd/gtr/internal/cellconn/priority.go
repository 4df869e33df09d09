package cellconn

import (
	"math"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/base"
	"google.golang.org/grpc/resolver"
)

// priorityName is the priority balancer's name in the service config.
//
// gRPC's pick_first over the ordered list would take the first instance
// that connects, but it neither health-checks its subchannel (outside a
// petiole policy) nor comes back to an earlier instance once that serves
// again. This balancer is grpc's base balancer (a subchannel per address,
// each health-checked) with a picker that takes the ready subchannel of
// the lowest rank: the first healthy instance in list order, again as
// soon as it is healthy.
const priorityName = "cellpay_priority"

func init() {
	balancer.Register(base.NewBalancerBuilder(priorityName, priorityBuilder{}, base.Config{HealthCheck: true}))
}

// rankKey keys an address's rank in its Attributes (BalancerAttributes is deprecated).
type rankKey struct{}

func withRank(a resolver.Address, rank int) resolver.Address {
	a.Attributes = a.Attributes.WithValue(rankKey{}, rank)
	return a
}

// rank is a's position in its list; an address without one (a dns:///
// name's) ranks after every listed one.
func rank(a resolver.Address) int {
	if r, ok := a.Attributes.Value(rankKey{}).(int); ok {
		return r
	}
	return math.MaxInt
}

type priorityBuilder struct{}

// Build picks once, off the request path: base calls it whenever the set
// of ready (connected and SERVING) subchannels changes.
func (priorityBuilder) Build(info base.PickerBuildInfo) balancer.Picker {
	var best balancer.SubConn
	var bestAddr resolver.Address
	for sc, i := range info.ReadySCs {
		// Equal ranks (DNS addresses) break on the address, so the choice
		// does not hang on map order.
		if best == nil || rank(i.Address) < rank(bestAddr) || rank(i.Address) == rank(bestAddr) && i.Address.Addr < bestAddr.Addr {
			best, bestAddr = sc, i.Address
		}
	}
	if best == nil {
		return base.NewErrPicker(balancer.ErrNoSubConnAvailable)
	}
	return firstPicker{best}
}

// firstPicker always picks the one subchannel it was built with.
type firstPicker struct{ sc balancer.SubConn }

func (p firstPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{SubConn: p.sc}, nil
}
