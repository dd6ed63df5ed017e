// Package certsigner is ipledger's own certificate authority for its gRPC
// servers: it keeps a CA (and, while one is rotated, the previous one) in a
// Secret only it may read, publishes their certificates in a ConfigMap
// every client mounts, and approves and signs the CertificateSigningRequests
// of SignerName that its Policy allows — each server's ServiceAccount, for
// its own Service's names. It needs nothing but the Kubernetes API, so it
// starts before, and never waits for, the servers it signs for.
package certsigner

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/ipledger/ipledger/pkg/backoff"
)

// Config configures the signer.
type Config struct {
	// Namespace holds the CA Secret and the bundle ConfigMap, and is the
	// namespace of the ServiceAccounts of DefaultPolicy.
	Namespace string
	// SecretName is the Secret of the CA keys (it must exist: the install
	// ships it empty, so the signer needs no right to create Secrets).
	SecretName string
	// ConfigMapName is the ConfigMap of the CA bundle (shipped empty too).
	ConfigMapName string
	// ClusterDomain is the suffix of the Service names (cluster.local).
	ClusterDomain string
	// CAValidity is a new CA's lifetime; it is replaced when a third is
	// left.
	CAValidity time.Duration
	// MaxValidity caps a serving certificate's lifetime.
	MaxValidity time.Duration
	// Propagation is how long a new CA is in the bundle before it signs.
	Propagation time.Duration
	// CAInterval is how often the CA is checked.
	CAInterval time.Duration
}

// Defaults of Config.
const (
	DefaultSecretName    = "ipledger-signer-ca"
	DefaultConfigMapName = "ipledger-grpc-ca-bundle"
	DefaultCAValidity    = 365 * 24 * time.Hour
	// DefaultMaxValidity: renewed after 40 days, a certificate has 20
	// left, so IpledgerGRPCCertificateExpiringSoon (14 days) fires only
	// after six days of failed renewals.
	DefaultMaxValidity = 60 * 24 * time.Hour
	// DefaultPropagation: the kubelet refreshes a mounted ConfigMap within
	// about a minute, and clients re-read the file at least every minute
	// (authz.ReloadingCA).
	DefaultPropagation = 3 * time.Minute
	DefaultCAInterval  = time.Minute
)

// Defaults fills the fields left unset.
func (c *Config) Defaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.SecretName, DefaultSecretName)
	def(&c.ConfigMapName, DefaultConfigMapName)
	def(&c.ClusterDomain, "cluster.local")
	for _, d := range []struct {
		p *time.Duration
		v time.Duration
	}{{&c.CAValidity, DefaultCAValidity}, {&c.MaxValidity, DefaultMaxValidity}, {&c.Propagation, DefaultPropagation}, {&c.CAInterval, DefaultCAInterval}} {
		if *d.p == 0 {
			*d.p = d.v
		}
	}
}

// Signer approves and signs.
type Signer struct {
	cfg     Config
	policy  Policy
	client  kubernetes.Interface
	log     *slog.Logger
	signing atomic.Pointer[CA]
	synced  atomic.Bool
}

// New builds a signer. client needs: get and update on the Secret and the
// ConfigMap; get, list and watch on certificatesigningrequests, update on
// their approval and status; approve and sign on signers/SignerName.
func New(cfg Config, client kubernetes.Interface, log *slog.Logger) *Signer {
	cfg.Defaults()
	return &Signer{cfg: cfg, policy: DefaultPolicy(cfg.Namespace, cfg.ClusterDomain), client: client, log: log}
}

// Ready is nil once the bundle is published and the CSRs are listed.
func (s *Signer) Ready() error {
	if s.signing.Load() == nil {
		return fmt.Errorf("no CA yet in Secret %s/%s and ConfigMap %s/%s", s.cfg.Namespace, s.cfg.SecretName, s.cfg.Namespace, s.cfg.ConfigMapName)
	}
	if !s.synced.Load() {
		return errors.New("CertificateSigningRequests not listed yet")
	}
	return nil
}

// Run keeps the CA and signs until ctx ends.
func (s *Signer) Run(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(s.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.signerName", SignerName).String()
	}))
	inf := factory.Certificates().V1().CertificateSigningRequests()
	lister := inf.Lister()
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(backoff.Queue[string](0),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "certsigner"})
	defer queue.ShutDown()
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			queue.Add(key)
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()

	go s.keepCA(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return nil
	}
	s.synced.Store(true)
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	for {
		name, shutdown := queue.Get()
		if shutdown {
			return nil
		}
		if err := s.sync(ctx, lister, name); err != nil {
			// A conflict is the lister a step behind our own write.
			if !errors.Is(err, errNoSigningCA) && !apierrors.IsConflict(err) {
				s.log.Error("CertificateSigningRequest not handled; retrying", "csr", name, "err", err)
			}
			queue.AddRateLimited(name)
		} else {
			queue.Forget(name)
		}
		queue.Done(name)
	}
}

// keepCA runs ensureCA now and every CAInterval.
func (s *Signer) keepCA(ctx context.Context) {
	t := time.NewTicker(s.cfg.CAInterval)
	defer t.Stop()
	for {
		if err := s.ensureCA(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("CA not kept", "secret", s.cfg.SecretName, "configMap", s.cfg.ConfigMapName, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ensureCA reads the CA Secret, generates a CA or drops ended ones as
// PlanCAs decides, publishes the bundle and chooses the signing CA.
func (s *Signer) ensureCA(ctx context.Context) error {
	secrets := s.client.CoreV1().Secrets(s.cfg.Namespace)
	sec, err := secrets.Get(ctx, s.cfg.SecretName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("Secret %s/%s (shipped empty by the install; re-apply it if deleted): %w", s.cfg.Namespace, s.cfg.SecretName, err)
	}
	cas, err := DecodeCAs(sec.Data)
	if err != nil {
		return fmt.Errorf("Secret %s/%s: %w (delete its data to start a new CA; every server then gets a new certificate)", s.cfg.Namespace, s.cfg.SecretName, err)
	}
	now := time.Now()
	plan := PlanCAs(certsOf(cas), now, s.cfg.Propagation)
	generated := plan.Generate
	if generated {
		ca, err := NewCA(now, s.cfg.CAValidity)
		if err != nil {
			return err
		}
		cas = append(cas, ca)
		plan = PlanCAs(certsOf(cas), now, s.cfg.Propagation)
		s.log.Info("New CA", "notAfter", ca.Cert.NotAfter.Format(time.RFC3339), "previous", len(plan.Live)-1)
	}
	live := make([]CA, len(plan.Live))
	for i, c := range plan.Live {
		live[i] = cas[slices.IndexFunc(cas, func(ca CA) bool { return ca.Cert == c })]
	}
	if len(live) != len(cas) || generated {
		sec = sec.DeepCopy()
		if sec.Data, err = EncodeCAs(live); err != nil {
			return err
		}
		if _, err := secrets.Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("write Secret %s/%s: %w", s.cfg.Namespace, s.cfg.SecretName, err)
		}
	}
	if err := s.publish(ctx, Bundle(plan.Live)); err != nil {
		return err
	}
	s.signing.Store(&live[plan.Signing])
	return nil
}

// publish writes bundle into the ConfigMap unless it is there already.
func (s *Signer) publish(ctx context.Context, bundle string) error {
	cms := s.client.CoreV1().ConfigMaps(s.cfg.Namespace)
	cm, err := cms.Get(ctx, s.cfg.ConfigMapName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("ConfigMap %s/%s (shipped empty by the install; re-apply it if deleted): %w", s.cfg.Namespace, s.cfg.ConfigMapName, err)
	}
	if cm.Data[BundleKey] == bundle {
		return nil
	}
	cm = cm.DeepCopy()
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[BundleKey] = bundle
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("write ConfigMap %s/%s: %w", s.cfg.Namespace, s.cfg.ConfigMapName, err)
	}
	s.log.Info("CA bundle published", "configMap", s.cfg.ConfigMapName)
	return nil
}

// sync approves or denies CSR name and signs it when approved.
func (s *Signer) sync(ctx context.Context, lister certlisters.CertificateSigningRequestLister, name string) error {
	csr, err := lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if len(csr.Status.Certificate) > 0 || hasCondition(csr, certv1.CertificateDenied) || hasCondition(csr, certv1.CertificateFailed) {
		return nil
	}
	csrs := s.client.CertificatesV1().CertificateSigningRequests()
	req, refused := s.policy.Review(csr.Spec)
	approved := hasCondition(csr, certv1.CertificateApproved)
	if refused != nil {
		csr = csr.DeepCopy()
		typ, reason := certv1.CertificateDenied, "IpledgerPolicy"
		if approved { // someone else approved it: fail it rather than sign
			typ = certv1.CertificateFailed
		}
		csr.Status.Conditions = append(csr.Status.Conditions, condition(typ, reason, refused.Error()))
		s.log.Info("CertificateSigningRequest refused", "csr", name, "requester", csr.Spec.Username, "reason", refused.Error())
		if typ == certv1.CertificateDenied {
			_, err = csrs.UpdateApproval(ctx, name, csr, metav1.UpdateOptions{})
		} else {
			_, err = csrs.UpdateStatus(ctx, csr, metav1.UpdateOptions{})
		}
		return err
	}
	ca := s.signing.Load()
	if ca == nil {
		return errNoSigningCA
	}
	if !approved {
		csr = csr.DeepCopy()
		csr.Status.Conditions = append(csr.Status.Conditions,
			condition(certv1.CertificateApproved, "IpledgerPolicy", "an ipledger server's ServiceAccount asking for its own Service's names"))
		if csr, err = csrs.UpdateApproval(ctx, name, csr, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("approve: %w", err)
		}
	}
	notBefore, notAfter := LeafWindow(time.Now(), csr.Spec.ExpirationSeconds, s.cfg.MaxValidity, ca.Cert.NotAfter)
	cert, err := ca.Sign(req, notBefore, notAfter)
	if err != nil {
		return err
	}
	csr = csr.DeepCopy()
	csr.Status.Certificate = cert
	if _, err := csrs.UpdateStatus(ctx, csr, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("sign: %w", err)
	}
	s.log.Info("CertificateSigningRequest signed", "csr", name, "requester", csr.Spec.Username, "notAfter", notAfter.Format(time.RFC3339))
	return nil
}

func hasCondition(csr *certv1.CertificateSigningRequest, t certv1.RequestConditionType) bool {
	return slices.ContainsFunc(csr.Status.Conditions, func(c certv1.CertificateSigningRequestCondition) bool {
		return c.Type == t && c.Status == corev1.ConditionTrue
	})
}

func condition(t certv1.RequestConditionType, reason, msg string) certv1.CertificateSigningRequestCondition {
	return certv1.CertificateSigningRequestCondition{Type: t, Status: corev1.ConditionTrue, Reason: reason, Message: msg,
		LastUpdateTime: metav1.Now()}
}

func certsOf(cas []CA) []*x509.Certificate {
	out := make([]*x509.Certificate, len(cas))
	for i, c := range cas {
		out[i] = c.Cert
	}
	return out
}
