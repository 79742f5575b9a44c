package shard

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// The Leases of a sharded fleet live in Options.Namespace of the home cluster. A peer
// finds a cluster's owner without asking it: ClusterLeaseName(cluster) names the cluster
// Lease, whose spec.holderIdentity is the owner; ReplicaLeaseName(owner) names the
// owner's Lease, whose AddressAnnotation says how to reach it. The owner holds the
// cluster while its replica Lease is renewed.
const (
	// LeaseLabel marks the Leases of this package, with the value LeaseReplica or
	// LeaseCluster, so that they are listed with one selector each.
	LeaseLabel   = "fleetwatch.io/lease"
	LeaseReplica = "replica"
	LeaseCluster = "cluster"

	// ClusterAnnotation, on a cluster Lease, is the cluster's name, which the Lease's
	// name holds only in part.
	ClusterAnnotation = "fleetwatch.io/cluster"
	// AddressAnnotation, on a replica Lease, is how peers reach the replica's API
	// (Options.Address); absent if it publishes none.
	AddressAnnotation = "fleetwatch.io/address"
	// InstanceAnnotation, on a replica Lease, tells the process that holds it from
	// another started with the same identity, which must wait for the Lease to expire.
	InstanceAnnotation = "fleetwatch.io/instance"
	// SuccessorAnnotation, on a replica Lease, is written by a process that found its
	// identity's Lease held by another instance (a restart after a kill -9 or an OOM
	// kill) while it waits for that Lease to expire: its instance and the time, renewed
	// every retry period. The others count the identity live while it changes, and leave
	// its clusters to it rather than take them cold; the waiting process judges the
	// holder by the Lease's spec alone. Removed when the process takes the Lease.
	SuccessorAnnotation = "fleetwatch.io/successor"
	// HandoverAnnotation, on a cluster Lease released on a planned move (ErrMoved), names
	// the replica that released it: it keeps the cluster's state for a while, for the
	// next holder to fetch (see Receiver). The next holder removes it as it takes the
	// Lease. A Lease given up because its holder lost its own has none.
	HandoverAnnotation = "fleetwatch.io/handover-from"
	// DescriptionAnnotation, on a replica Lease, is what the replica publishes about the
	// clusters it owns (Options.Describe), for the others to read as Placement.Description;
	// absent if it publishes nothing.
	DescriptionAnnotation = "fleetwatch.io/description"

	// StartedAnnotation, on a replica Lease, says that the replica is done waiting for
	// the others to join (Options.Replicas) and takes its clusters: a replica that
	// starts and sees it on another's live Lease joins a fleet that runs, and waits for
	// no one.
	StartedAnnotation = "fleetwatch.io/started"

	// BalanceAnnotation, on a replica Lease, is the replica's Options.Balance: the
	// replicas place by cost only while every member's says BalanceObjects (see
	// Options.Balance).
	BalanceAnnotation = "fleetwatch.io/balance"
	// CostAnnotation, on a cluster Lease, is the cluster's cost as its holder last
	// published it with BalanceObjects: its objects, quantized (Requantize), a decimal
	// integer. It stays on the Lease as the cluster moves; absent until a holder knew
	// the cluster's objects.
	CostAnnotation = "fleetwatch.io/cost"

	replicaLeasePrefix = "fleetwatch-replica-"
	clusterLeasePrefix = "fleetwatch-cluster-"
)

// Defaults of Options, those of client-go's leaderelection as kube-controller-manager
// and controller-runtime use them: a replica that cannot renew for RenewDeadline gives
// its clusters up, 5 s before its Lease expires for the others, and tries every
// RetryPeriod.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// jitterFactor is client-go leaderelection's JitterFactor: RenewDeadline must leave
// room for more than one try.
const jitterFactor = 1.2

// ReplicaLeaseName is the name of the Lease of the replica identity.
func ReplicaLeaseName(identity string) string { return replicaLeasePrefix + identity }

// ClusterLeaseName is the name of the Lease of a cluster: the cluster name made a DNS
// label (lowercase, other characters as "-", at most 40 of them), then a hash of the
// whole name, since names such as EKS ARNs would otherwise collide or not fit.
func ClusterLeaseName(cluster string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(cluster) {
		if b.Len() == 40 {
			break
		}
		if ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	sum := sha256.Sum256([]byte(cluster))
	readable := strings.Trim(b.String(), "-")
	if readable != "" {
		readable += "-"
	}
	return clusterLeasePrefix + readable + hex.EncodeToString(sum[:5])
}

// ValidateIdentity checks that identity can name a replica: non-empty, and its Lease's
// name a valid object name.
func ValidateIdentity(identity string) error {
	if identity == "" {
		return errors.New("the identity is empty")
	}
	if errs := validation.IsDNS1123Subdomain(ReplicaLeaseName(identity)); len(errs) > 0 {
		return fmt.Errorf("%q does not make a Lease name: use lower case letters, digits, '-' and '.', beginning and ending with a letter or digit, at most %d in all",
			identity, validation.DNS1123SubdomainMaxLength-len(replicaLeasePrefix))
	}
	return nil
}

// TimingError says which duration of Options is wrong.
type TimingError struct {
	// Field is LeaseDuration, RenewDeadline or RetryPeriod.
	Field string
	// Err is the reason, which names the other durations by their fields of Options.
	Err error
	// bound is the field that Field must be shorter than (empty where the reason names
	// none), boundValue its value divided by over, and value Field's.
	bound             string
	boundValue, value time.Duration
	over              float64
}

func (e *TimingError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *TimingError) Unwrap() error { return e.Err }

// Reason is Err's text with each duration it refers to named by name(field), so that a
// caller reports the bound by the name its user set it by (a configuration key, a flag),
// not by the field of Options.
func (e *TimingError) Reason(name func(field string) string) string {
	if e.bound == "" {
		return e.Err.Error()
	}
	return e.shorterThan(name(e.bound))
}

// shorterThan is the reason of an error of a duration not shorter than its bound, named
// bound.
func (e *TimingError) shorterThan(bound string) string {
	if e.over != 1 {
		return fmt.Sprintf("must be shorter than %s (%s) / %.1f, got %s", bound, e.boundValue, e.over, e.value)
	}
	return fmt.Sprintf("must be shorter than %s (%s), got %s", bound, e.boundValue, e.value)
}

// notShorter returns the error of field, of the given value, not shorter than bound,
// of boundValue, divided by over.
func notShorter(field string, value time.Duration, bound string, boundValue time.Duration, over float64) *TimingError {
	e := &TimingError{Field: field, bound: bound, boundValue: boundValue, value: value, over: over}
	e.Err = errors.New(e.shorterThan(bound))
	return e
}

// ValidateTiming checks the durations as client-go's leaderelection does: each positive,
// LeaseDuration longer than RenewDeadline (the time in which a replica that cannot renew
// stops its informers, before others may start theirs), and RenewDeadline longer than
// 1.2 RetryPeriod (room for a second try). It returns nil or a *TimingError per problem,
// joined.
func ValidateTiming(leaseDuration, renewDeadline, retryPeriod time.Duration) error {
	var errs []error
	for _, d := range []struct {
		field string
		d     time.Duration
	}{{"LeaseDuration", leaseDuration}, {"RenewDeadline", renewDeadline}, {"RetryPeriod", retryPeriod}} {
		if d.d <= 0 {
			errs = append(errs, &TimingError{Field: d.field, Err: fmt.Errorf("must be positive, got %s", d.d)})
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if leaseDuration <= renewDeadline {
		errs = append(errs, notShorter("RenewDeadline", renewDeadline, "LeaseDuration", leaseDuration, 1))
	}
	if float64(renewDeadline) <= jitterFactor*float64(retryPeriod) {
		errs = append(errs, notShorter("RetryPeriod", retryPeriod, "RenewDeadline", renewDeadline, jitterFactor))
	}
	return errors.Join(errs...)
}
