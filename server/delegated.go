package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
)

// Defaults of DelegatedAuth.
const (
	DefaultTokenCacheTTL = 10 * time.Second
	DefaultAllowCacheTTL = 5 * time.Minute
	DefaultDenyCacheTTL  = 30 * time.Second
	// DefaultReviewQPS and DefaultReviewBurst are the rate limits of the delegating
	// authenticator and authorizer of k8s.io/apiserver (pkg/server/options, getClient:
	// "set high qps/burst limits since this will effectively limit API server
	// responsiveness"), rather than client-go's 5 and 10: a user granted clusters one by
	// one needs a review per cluster.
	DefaultReviewQPS   = 200
	DefaultReviewBurst = 400
	// reviewTimeout bounds each TokenReview and SubjectAccessReview, as the
	// ClientTimeout of k8s.io/apiserver's delegating authorizer does.
	reviewTimeout = 10 * time.Second
	// reviewParallelism bounds the SubjectAccessReviews that one request has in flight.
	reviewParallelism = 16
	// reviewCacheSize bounds each cache of review answers.
	reviewCacheSize = 4096
)

// DelegatedAuth has a Kubernetes cluster, the home cluster, authenticate and authorize
// the requests, the way aggregated API servers and kube-rbac-proxy do:
//
//   - a bearer token that the token file does not hold is sent to the home cluster in a
//     TokenReview (authentication.k8s.io/v1), which names its user and groups;
//   - that user may read a cluster of the fleet if a SubjectAccessReview
//     (authorization.k8s.io/v1) allows the verb get on the resource
//     clusters.fleetwatch.io with the cluster's name, so RBAC in the home cluster grants
//     access per cluster with resourceNames, or to every cluster without them;
//   - /metrics needs get on the non-resource URL /metrics, as for Kubernetes components.
//
// A request's decisions are made before it reads the cache, and hold for the whole
// request, so a watch keeps the access it started with, as in Kubernetes. A read of
// every cluster asks first whether the user may read every cluster (get on
// clusters.fleetwatch.io without a name); if not, it asks for each cluster of the fleet,
// up to 16 reviews at once, and a cluster that joins the fleet later is not part of it.
// If a review cannot be made (the home cluster is down or too slow), the request fails
// with an InternalError Status: it is never answered with fewer clusters than the user
// may read.
//
// Answers are cached: TokenReviews, accepted or rejected, for TokenCacheTTL, so that a
// token sent again, valid or not, costs no review; allowed access for AllowCacheTTL and
// denied access for DenyCacheTTL. Each cache holds at most 4096 answers, the least
// recently used going first, and rejected tokens are cached apart, so a flood of random
// tokens neither grows memory nor evicts accepted ones. Requests that need the same
// answer at the same time share one review. Failed reviews are not cached.
type DelegatedAuth struct {
	// Config reaches the home cluster. Its user needs create on tokenreviews and
	// subjectaccessreviews, which the ClusterRole system:auth-delegator grants.
	// Required.
	Config *rest.Config
	// QPS and Burst limit the rate of reviews sent to the home cluster; they replace
	// those of Config. Defaults DefaultReviewQPS and DefaultReviewBurst.
	QPS   float32
	Burst int
	// Audiences, if not empty, are the audiences a token must be meant for: they are
	// sent in each TokenReview, and a token is accepted only if the home cluster
	// answers that it is valid for one of them. Default: none, which means the home
	// cluster's own (its --api-audiences, those of its service account tokens), and no
	// check.
	Audiences []string
	// TokenCacheTTL is how long a TokenReview's answer is used, whether it accepted or
	// rejected the token. Default DefaultTokenCacheTTL.
	TokenCacheTTL time.Duration
	// AllowCacheTTL and DenyCacheTTL are how long a SubjectAccessReview that allowed,
	// or denied, is used. Defaults DefaultAllowCacheTTL and DefaultDenyCacheTTL.
	AllowCacheTTL time.Duration
	DenyCacheTTL  time.Duration
	// StateNamespace is the namespace of the SubjectAccessReview that decides whether a
	// client may read a cluster's handed-over state ("get" on "clusters/state" of
	// GroupName, see StatePath): the namespace of a sharded fleet's Leases, where the
	// replicas' Role grants it. Default: empty, a cluster-wide review.
	StateNamespace string
}

func (d DelegatedAuth) withDefaults() DelegatedAuth {
	if d.QPS == 0 {
		d.QPS = DefaultReviewQPS
	}
	if d.Burst == 0 {
		d.Burst = DefaultReviewBurst
	}
	if d.TokenCacheTTL == 0 {
		d.TokenCacheTTL = DefaultTokenCacheTTL
	}
	if d.AllowCacheTTL == 0 {
		d.AllowCacheTTL = DefaultAllowCacheTTL
	}
	if d.DenyCacheTTL == 0 {
		d.DenyCacheTTL = DefaultDenyCacheTTL
	}
	d.Audiences = slices.Clone(d.Audiences)
	return d
}

func (d DelegatedAuth) validate() error {
	var errs []error
	if d.Config == nil {
		errs = append(errs, fmt.Errorf("Options.Delegated.Config: nil: %w", ErrInvalidOptions))
	}
	if d.QPS < 0 {
		errs = append(errs, fmt.Errorf("Options.Delegated.QPS: negative rate %v: %w", d.QPS, ErrInvalidOptions))
	}
	if d.Burst < 0 {
		errs = append(errs, fmt.Errorf("Options.Delegated.Burst: negative burst %d: %w", d.Burst, ErrInvalidOptions))
	}
	for i, a := range d.Audiences {
		if a == "" {
			errs = append(errs, fmt.Errorf("Options.Delegated.Audiences[%d]: empty: %w", i, ErrInvalidOptions))
		}
	}
	for name, v := range map[string]time.Duration{"TokenCacheTTL": d.TokenCacheTTL, "AllowCacheTTL": d.AllowCacheTTL, "DenyCacheTTL": d.DenyCacheTTL} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("Options.Delegated.%s: negative duration %v: %w", name, v, ErrInvalidOptions))
		}
	}
	return errors.Join(errs...)
}

// delegatedAuth asks the home cluster.
type delegatedAuth struct {
	opts   DelegatedAuth
	tokens authenticationclient.TokenReviewInterface
	access authorizationclient.SubjectAccessReviewInterface
	// accepted maps the SHA-256 of a token to the *authenticationv1.UserInfo of the
	// home cluster's answer; rejected holds the SHA-256 of the tokens it rejected.
	accepted, rejected *utilcache.LRUExpireCache
	// decisions maps accessKey strings to bools.
	decisions *utilcache.LRUExpireCache
	// inFlight shares a review between the requests that wait for its answer.
	inFlight singleflight.Group
}

func newDelegatedAuth(opts DelegatedAuth) (*delegatedAuth, error) {
	cfg := rest.CopyConfig(opts.Config)
	// One budget for both clients: QPS and Burst bound what the home cluster gets.
	cfg.QPS, cfg.Burst = opts.QPS, opts.Burst
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(opts.QPS, opts.Burst)
	authn, err := authenticationclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("Options.Delegated.Config: %w", err)
	}
	authz, err := authorizationclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("Options.Delegated.Config: %w", err)
	}
	return &delegatedAuth{
		opts:      opts,
		tokens:    authn.TokenReviews(),
		access:    authz.SubjectAccessReviews(),
		accepted:  utilcache.NewLRUExpireCache(reviewCacheSize),
		rejected:  utilcache.NewLRUExpireCache(reviewCacheSize),
		decisions: utilcache.NewLRUExpireCache(reviewCacheSize),
	}, nil
}

// authenticate reviews a token. It returns nil if the home cluster does not accept it,
// and an InternalError if the home cluster could not be asked.
func (d *delegatedAuth) authenticate(ctx context.Context, token string) (*principal, error) {
	sum := sha256.Sum256([]byte(token))
	if v, ok := d.accepted.Get(sum); ok {
		return d.principal(v.(*authenticationv1.UserInfo)), nil
	}
	if _, ok := d.rejected.Get(sum); ok {
		return nil, nil
	}
	v, err := d.review(ctx, "token "+string(sum[:]), func(ctx context.Context) (any, error) {
		if v, ok := d.accepted.Get(sum); ok {
			return v, nil // answered while this request waited to start the review
		}
		if _, ok := d.rejected.Get(sum); ok {
			return (*authenticationv1.UserInfo)(nil), nil
		}
		review, err := d.tokens.Create(ctx, &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: d.opts.Audiences},
		}, metav1.CreateOptions{})
		if err != nil {
			// The error is the client's, about the request; it does not hold the token.
			klog.FromContext(ctx).Error(err, "TokenReview with the home cluster failed; the request fails")
			return nil, err
		}
		st := review.Status
		switch {
		case !st.Authenticated:
			klog.FromContext(ctx).V(2).Info("The home cluster rejected a token", "reason", st.Error)
		case len(d.opts.Audiences) > 0 && !slices.ContainsFunc(st.Audiences, func(a string) bool { return slices.Contains(d.opts.Audiences, a) }):
			// As k8s.io/apiserver's webhook authenticator: a token is accepted only for
			// one of the audiences asked for.
			klog.FromContext(ctx).V(2).Info("The home cluster accepted a token for other audiences", "user", st.User.Username, "audiences", st.Audiences, "want", d.opts.Audiences)
		default:
			user := st.User
			d.accepted.Add(sum, &user, d.opts.TokenCacheTTL)
			return &user, nil
		}
		d.rejected.Add(sum, struct{}{}, d.opts.TokenCacheTTL)
		return (*authenticationv1.UserInfo)(nil), nil
	})
	if err != nil {
		return nil, apierrors.NewInternalError(errors.New("the home cluster could not review the bearer token; see the server's log"))
	}
	if user := v.(*authenticationv1.UserInfo); user != nil {
		return d.principal(user), nil
	}
	return nil, nil
}

// review returns the answer of fn, the review identified by key, sharing it with the
// requests that wait for the same review. fn runs with its own timeout, detached from
// the cancellation of ctx, so that the request that started it does not fail the
// others by going away; ctx bounds only the wait. No review starts once ctx is done.
func (d *delegatedAuth) review(ctx context.Context, key string, fn func(ctx context.Context) (any, error)) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ch := d.inFlight.DoChan(key, func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reviewTimeout)
		defer cancel()
		return fn(ctx)
	})
	select {
	case res := <-ch:
		return res.Val, res.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// principal returns the principal of a user that the home cluster authenticated.
func (d *delegatedAuth) principal(user *authenticationv1.UserInfo) *principal {
	return &principal{name: user.Username, access: &delegatedAccess{d: d, user: user}}
}

// delegatedAccess is what the home cluster lets one user read.
type delegatedAccess struct {
	d    *delegatedAuth
	user *authenticationv1.UserInfo
}

var _ authorizer = (*delegatedAccess)(nil)

func clusterAttributes(name string) *authorizationv1.ResourceAttributes {
	return &authorizationv1.ResourceAttributes{Verb: "get", Group: GroupName, Resource: "clusters", Name: name}
}

// clusters decides, for a request that reads more than one cluster, whether the user
// may read every cluster, and if not, each of names, with reviews in parallel. The
// first review that fails ends the others' wait and fails the request.
func (a *delegatedAccess) clusters(ctx context.Context, names []string) (func(string) bool, error) {
	if len(names) > 1 {
		every, err := a.d.authorize(ctx, a.user, clusterAttributes(""), nil)
		if err != nil {
			return nil, a.reviewFailed("read every cluster", err)
		}
		if every {
			return nil, nil
		}
	}
	allowed := make([]bool, len(names))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(reviewParallelism)
	for i, name := range names {
		g.Go(func() error {
			ok, err := a.d.authorize(gctx, a.user, clusterAttributes(name), nil)
			if err != nil {
				return a.reviewFailed(fmt.Sprintf("read cluster %q", name), err)
			}
			allowed[i] = ok
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	set := make(map[string]bool)
	for i, name := range names {
		if allowed[i] {
			set[name] = true
		}
	}
	return func(cluster string) bool { return set[cluster] }, nil
}

func (a *delegatedAccess) metrics(ctx context.Context) (bool, error) {
	ok, err := a.d.authorize(ctx, a.user, nil, &authorizationv1.NonResourceAttributes{Verb: "get", Path: "/metrics"})
	if err != nil {
		return false, a.reviewFailed(`get "/metrics"`, err)
	}
	return ok, nil
}

// reviewFailed is the error of a request whose authorization could not be decided: an
// InternalError, as kube-apiserver answers when its authorizer fails. The cause, logged
// where the review failed, is not sent: it may describe the home cluster.
func (a *delegatedAccess) reviewFailed(what string, err error) error {
	if errors.Is(err, context.Canceled) {
		return err // the client went away, or another review failed first
	}
	return apierrors.NewInternalError(fmt.Errorf("the home cluster could not review whether %s may %s; see the server's log", a.user.Username, what))
}

// authorize asks the home cluster whether user may do what the attributes say.
func (d *delegatedAuth) authorize(ctx context.Context, user *authenticationv1.UserInfo, ra *authorizationv1.ResourceAttributes, nra *authorizationv1.NonResourceAttributes) (bool, error) {
	spec := authorizationv1.SubjectAccessReviewSpec{
		ResourceAttributes:    ra,
		NonResourceAttributes: nra,
		User:                  user.Username,
		Groups:                user.Groups,
		UID:                   user.UID,
	}
	if len(user.Extra) > 0 {
		spec.Extra = make(map[string]authorizationv1.ExtraValue, len(user.Extra))
		for k, v := range user.Extra {
			spec.Extra[k] = authorizationv1.ExtraValue(v)
		}
	}
	key := accessKey(&spec)
	if v, ok := d.decisions.Get(key); ok {
		return v.(bool), nil
	}
	v, err := d.review(ctx, "access "+key, func(ctx context.Context) (any, error) {
		if v, ok := d.decisions.Get(key); ok {
			return v, nil
		}
		review, err := d.access.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			klog.FromContext(ctx).Error(err, "SubjectAccessReview with the home cluster failed; the request fails", "user", user.Username)
			return nil, err
		}
		allowed := review.Status.Allowed && !review.Status.Denied
		ttl := d.opts.DenyCacheTTL
		if allowed {
			ttl = d.opts.AllowCacheTTL
		}
		d.decisions.Add(key, allowed, ttl)
		return allowed, nil
	})
	if err != nil {
		return false, err
	}
	return v.(bool), nil
}

// accessKey identifies a SubjectAccessReview's question.
func accessKey(s *authorizationv1.SubjectAccessReviewSpec) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%q %q %q", s.User, s.UID, s.Groups)
	for _, k := range slices.Sorted(maps.Keys(s.Extra)) {
		fmt.Fprintf(&b, " %q=%q", k, []string(s.Extra[k]))
	}
	if ra := s.ResourceAttributes; ra != nil {
		fmt.Fprintf(&b, " resource %q %q %q %q %q %q", ra.Verb, ra.Namespace, ra.Group, ra.Resource, ra.Subresource, ra.Name)
	}
	if nra := s.NonResourceAttributes; nra != nil {
		fmt.Fprintf(&b, " path %q %q", nra.Verb, nra.Path)
	}
	return b.String()
}
