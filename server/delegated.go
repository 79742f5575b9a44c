package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// Defaults of DelegatedAuth.
const (
	DefaultTokenCacheTTL = 10 * time.Second
	DefaultAllowCacheTTL = 5 * time.Minute
	DefaultDenyCacheTTL  = 30 * time.Second
	// reviewTimeout bounds each TokenReview and SubjectAccessReview.
	reviewTimeout = 10 * time.Second
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
// The decisions of a request hold for the whole request, so a watch keeps the access it
// started with, as in Kubernetes. Answers are cached: TokenReviews for TokenCacheTTL,
// allowed access for AllowCacheTTL and denied access for DenyCacheTTL. An answer that
// could not be obtained (the home cluster is down) denies the request and is not
// cached.
type DelegatedAuth struct {
	// Config reaches the home cluster. Its user needs create on tokenreviews and
	// subjectaccessreviews, which the ClusterRole system:auth-delegator grants.
	// Required.
	Config *rest.Config
	// Audiences, if not empty, are the audiences a token must be meant for. Default:
	// none, which means the home cluster's own.
	Audiences []string
	// TokenCacheTTL is how long a TokenReview's answer is used. Default
	// DefaultTokenCacheTTL.
	TokenCacheTTL time.Duration
	// AllowCacheTTL and DenyCacheTTL are how long a SubjectAccessReview that allowed,
	// or denied, is used. Defaults DefaultAllowCacheTTL and DefaultDenyCacheTTL.
	AllowCacheTTL time.Duration
	DenyCacheTTL  time.Duration
}

func (d DelegatedAuth) withDefaults() DelegatedAuth {
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
	// tokenCache maps the SHA-256 of a token to its *authenticationv1.UserInfo, or to
	// nil for a token the home cluster rejected.
	tokenCache *utilcache.LRUExpireCache
	// accessCache maps accessKey strings to bools.
	accessCache *utilcache.LRUExpireCache
}

func newDelegatedAuth(opts DelegatedAuth) (*delegatedAuth, error) {
	authn, err := authenticationclient.NewForConfig(opts.Config)
	if err != nil {
		return nil, fmt.Errorf("Options.Delegated.Config: %w", err)
	}
	authz, err := authorizationclient.NewForConfig(opts.Config)
	if err != nil {
		return nil, fmt.Errorf("Options.Delegated.Config: %w", err)
	}
	return &delegatedAuth{
		opts:        opts,
		tokens:      authn.TokenReviews(),
		access:      authz.SubjectAccessReviews(),
		tokenCache:  utilcache.NewLRUExpireCache(reviewCacheSize),
		accessCache: utilcache.NewLRUExpireCache(reviewCacheSize),
	}, nil
}

// authenticate reviews a token; it returns nil if the home cluster does not accept it,
// or cannot be asked.
func (d *delegatedAuth) authenticate(ctx context.Context, token string) *principal {
	key := sha256.Sum256([]byte(token))
	var user *authenticationv1.UserInfo
	if v, ok := d.tokenCache.Get(key); ok {
		user = v.(*authenticationv1.UserInfo)
	} else {
		ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
		defer cancel()
		review, err := d.tokens.Create(ctx, &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: d.opts.Audiences},
		}, metav1.CreateOptions{})
		if err != nil {
			// The error is the client's, about the request; it does not hold the token.
			klog.FromContext(ctx).Error(err, "TokenReview with the home cluster failed; the request is not authenticated")
			return nil
		}
		if review.Status.Authenticated {
			user = &review.Status.User
		} else if review.Status.Error != "" {
			klog.FromContext(ctx).V(2).Info("The home cluster rejected a token", "reason", review.Status.Error)
		}
		d.tokenCache.Add(key, user, d.opts.TokenCacheTTL)
	}
	if user == nil {
		return nil
	}
	return d.principal(ctx, user)
}

// principal returns the principal of a user for one request. Its decisions are made
// once per request.
func (d *delegatedAuth) principal(ctx context.Context, user *authenticationv1.UserInfo) *principal {
	var mu sync.Mutex
	decided := make(map[string]bool)
	allEvery := sync.OnceValue(func() bool {
		return d.authorize(ctx, user, &authorizationv1.ResourceAttributes{Verb: "get", Group: GroupName, Resource: "clusters"}, nil)
	})
	return &principal{
		name: user.Username,
		allowCluster: func(cluster string) bool {
			if allEvery() {
				return true
			}
			mu.Lock()
			defer mu.Unlock()
			ok, seen := decided[cluster]
			if !seen {
				ok = d.authorize(ctx, user, &authorizationv1.ResourceAttributes{Verb: "get", Group: GroupName, Resource: "clusters", Name: cluster}, nil)
				decided[cluster] = ok
			}
			return ok
		},
		allowMetrics: sync.OnceValue(func() bool {
			return d.authorize(ctx, user, nil, &authorizationv1.NonResourceAttributes{Verb: "get", Path: "/metrics"})
		}),
	}
}

// authorize asks the home cluster whether user may do what the attributes say.
func (d *delegatedAuth) authorize(ctx context.Context, user *authenticationv1.UserInfo, ra *authorizationv1.ResourceAttributes, nra *authorizationv1.NonResourceAttributes) bool {
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
	if v, ok := d.accessCache.Get(key); ok {
		return v.(bool)
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	review, err := d.access.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		klog.FromContext(ctx).Error(err, "SubjectAccessReview with the home cluster failed; access denied", "user", user.Username)
		return false
	}
	allowed := review.Status.Allowed && !review.Status.Denied
	ttl := d.opts.DenyCacheTTL
	if allowed {
		ttl = d.opts.AllowCacheTTL
	}
	d.accessCache.Add(key, allowed, ttl)
	return allowed
}

// accessKey identifies a SubjectAccessReview's question.
func accessKey(s *authorizationv1.SubjectAccessReviewSpec) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%q %q %q", s.User, s.UID, s.Groups)
	for _, k := range slices.Sorted(maps.Keys(s.Extra)) {
		fmt.Fprintf(&b, " %q=%q", k, []string(s.Extra[k]))
	}
	if ra := s.ResourceAttributes; ra != nil {
		fmt.Fprintf(&b, " resource %q %q %q %q", ra.Verb, ra.Group, ra.Resource, ra.Name)
	}
	if nra := s.NonResourceAttributes; nra != nil {
		fmt.Fprintf(&b, " path %q %q", nra.Verb, nra.Path)
	}
	return b.String()
}
