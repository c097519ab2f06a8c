package isrnode

import (
	"fmt"
	"testing"

	"quire/internal/isr"
)

// TestRegistrationCarriesLogEnds: a broker's registration says where each
// of its replicas' logs ends, read from disk before it registers, so that
// the controller's unclean recovery can compare the logs of a partition
// with no leader.
func TestRegistrationCarriesLogEnds(t *testing.T) {
	c := newCluster(t, 1, 2, 3)
	leader := c.waitLeader("a leader").id
	for i := range 4 {
		if _, _, err := c.append(leader, isr.AcksAll, fmt.Sprintf("r%d", i), 3); err != nil {
			t.Fatal(err)
		}
	}
	follower := c.followers(leader)[0]
	c.waitInSync(leader)
	want := c.status(follower).LogEndOffset
	if want == 0 {
		t.Fatal("the follower has no records")
	}
	c.stop(follower)
	c.start(follower)
	kv, err := c.meta.Get(c.ctx, isr.BrokerKey(follower))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := isr.UnmarshalRegistration(kv.Value, int64(kv.Version))
	if err != nil {
		t.Fatal(err)
	}
	if len(reg.LogEnds) != 1 || reg.LogEnds[0].Partition != partition || reg.LogEnds[0].EndOffset != want || reg.LogEnds[0].LastEpoch < 0 {
		t.Fatalf("registration %+v: want the log of %s ending at %d", reg, partition, want)
	}
}
