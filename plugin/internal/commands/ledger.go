package commands

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/ipledger/ipledger/pkg/install"
)

// The ledger as ipam writes it (services/ipam/internal/ledger, which the
// plugin cannot import): ConfigMaps ipledger-ledger-<n> labelled
// ipledger.io/ledger=true, each with the format key.
const (
	ledgerLabel  = "ipledger.io/ledger"
	ledgerPrefix = "ipledger-ledger-"
	ledgerFormat = "ipledger.io/ledger/v1"
	// restoreManager is the field manager of a restore: ipam reports the
	// restored shards as written by it (LedgerForeignWrite).
	restoreManager = "kubectl-ipledger-restore"
	breakGlass     = "ipledger:ledger-admins"
	// releasedAnnotation is the word a cleanly stopped ipam leaves on the
	// head (docs/fencing.md): a restore takes it away, so that the next
	// leader fences every shard of the restored ledger.
	releasedAnnotation = "ipledger.io/released-epoch"
)

func newLedgerCommand(o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ledger",
		Short: "Back up and restore ipam's ledger (the restore needs the break-glass group)",
		Long: `The ledger is the ConfigMaps ipledger-ledger-<n> in ipam's namespace (--ipam-namespace): every address
ipam gave out and every reservation. backup writes them as one YAML List; restore puts such a List back,
replacing the ledger whole. Only ipam and the group ipledger:ledger-admins may write the ledger (the
admission policy ipledger-ledger-writers; docs/security.md): run restore with --as-group=ipledger:ledger-admins
and --as=<you>, or as a member of the group.`,
		Example: `  kubectl ipledger ledger backup > ledger-$(date +%F).yaml
  kubectl -n ` + install.DefaultNamespace + ` scale deploy/ipledger-ipam --replicas=0
  kubectl ipledger ledger restore -f ledger-2026-12-01.yaml \
    --as="$(kubectl auth whoami -o jsonpath='{.status.userInfo.username}')" --as-group=ipledger:ledger-admins
  kubectl -n ` + install.DefaultNamespace + ` scale deploy/ipledger-ipam --replicas=2`,
	}
	cmd.AddCommand(newLedgerBackupCommand(o), newLedgerRestoreCommand(o))
	return cmd
}

func newLedgerBackupCommand(o *Options) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Write the ledger's ConfigMaps as a YAML List (needs get and list on ConfigMaps)",
		Long: `backup reads the ledger from the API server and writes it, as a v1 List of ConfigMaps without
server-set metadata, to stdout or --file. Reading is open to whoever may read ConfigMaps in ipam's
namespace; what the ledger names (Services, addresses, reservation notes) is as sensitive as that.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), o.Timeout)
			defer cancel()
			client, err := o.kubeClient()
			if err != nil {
				return err
			}
			shards, err := listLedger(ctx, client, o.Connect.Namespace)
			if err != nil {
				return err
			}
			if len(shards) == 0 {
				return fmt.Errorf("namespace %s has no ledger ConfigMaps (label %s=true): is ipam's namespace another (--ipam-namespace)?", o.Connect.Namespace, ledgerLabel)
			}
			list := backupList{APIVersion: "v1", Kind: "List"}
			size := 0
			for _, cm := range shards {
				list.Items = append(list.Items, corev1.ConfigMap{
					TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
					ObjectMeta: metav1.ObjectMeta{Name: cm.Name, Namespace: cm.Namespace, Labels: cm.Labels},
					Data:       cm.Data,
				})
				for _, v := range cm.Data {
					size += len(v)
				}
			}
			out, err := yaml.Marshal(list)
			if err != nil {
				return err
			}
			w := o.Streams.Out
			if file != "" && file != "-" {
				if err := os.WriteFile(file, out, 0o600); err != nil {
					return err
				}
			} else if _, err := w.Write(out); err != nil {
				return err
			}
			fmt.Fprintf(o.Streams.ErrOut, "Backed up %d ledger ConfigMaps of %s (%d bytes of data)\n", len(shards), o.Connect.Namespace, size)
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "Write the backup to this file (mode 0600) instead of stdout.")
	return cmd
}

func newLedgerRestoreCommand(o *Options) *cobra.Command {
	var file string
	var whileRunning bool
	cmd := &cobra.Command{
		Use:   "restore -f FILE",
		Short: "Replace the ledger with a backup (needs the group ipledger:ledger-admins)",
		Long: `restore checks a backup (every item a ConfigMap ipledger-ledger-<n> of the ledger's format, the head
ipledger-ledger-0 among them), then writes each shard and deletes the ledger ConfigMaps the backup does not
have. Stop ipam first (scale its Deployment to 0): restore refuses while the Deployment wants replicas,
unless --while-running (a running leader then fences the restored ledger anew, docs/fencing.md). When ipam
starts it reports the restored shards (Warning Event LedgerForeignWrite) and does not obey an entry that
the Services' statuses contradict: an address a Service's status shows stays with it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return fmt.Errorf("--file: name the backup to restore (- for stdin)")
			}
			var r io.Reader = o.Streams.In
			if file != "-" {
				data, err := os.ReadFile(file)
				if err != nil {
					return err
				}
				r = bytes.NewReader(data)
			}
			raw, err := io.ReadAll(r)
			if err != nil {
				return err
			}
			shards, err := parseBackup(raw, file, o.Connect.Namespace)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), o.Timeout)
			defer cancel()
			client, err := o.kubeClient()
			if err != nil {
				return err
			}
			if !whileRunning {
				d, err := client.AppsV1().Deployments(o.Connect.Namespace).Get(ctx, "ipledger-ipam", metav1.GetOptions{})
				if err == nil && (d.Spec.Replicas == nil || *d.Spec.Replicas > 0) {
					return fmt.Errorf("Deployment %s/ipledger-ipam wants replicas: stop it first (kubectl -n %s scale deploy/ipledger-ipam --replicas=0), or pass --while-running",
						o.Connect.Namespace, o.Connect.Namespace)
				}
				if err != nil && !apierrors.IsNotFound(err) {
					return fmt.Errorf("checking that ipam is stopped: %w; pass --while-running to restore without checking", err)
				}
			}
			current, err := listLedger(ctx, client, o.Connect.Namespace)
			if err != nil {
				return err
			}
			return restoreLedger(ctx, o, client, shards, current)
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "The backup (a List written by `kubectl ipledger ledger backup`); - reads stdin.")
	cmd.Flags().BoolVar(&whileRunning, "while-running", false, "Restore although ipam's Deployment has replicas.")
	return cmd
}

// restoreLedger writes shards over current: each shard updated (or
// created), then the ledger ConfigMaps the backup lacks deleted, head last
// so that a restore cut short leaves a head that still lists what exists.
func restoreLedger(ctx context.Context, o *Options, client kubernetes.Interface, shards []corev1.ConfigMap, current []corev1.ConfigMap) error {
	cms := client.CoreV1().ConfigMaps(o.Connect.Namespace)
	byName := map[string]corev1.ConfigMap{}
	for _, cm := range current {
		byName[cm.Name] = cm
	}
	written := 0
	for _, want := range shards {
		var err error
		if have, ok := byName[want.Name]; ok {
			have.Data, have.Labels = want.Data, want.Labels
			delete(have.Annotations, releasedAnnotation)
			_, err = cms.Update(ctx, &have, metav1.UpdateOptions{FieldManager: restoreManager})
		} else {
			want.ResourceVersion = ""
			_, err = cms.Create(ctx, &want, metav1.CreateOptions{FieldManager: restoreManager})
		}
		if err != nil {
			return refusedLedgerWrite(err, want.Name, written)
		}
		written++
	}
	var extra []string
	for name := range byName {
		if !slices.ContainsFunc(shards, func(cm corev1.ConfigMap) bool { return cm.Name == name }) {
			extra = append(extra, name)
		}
	}
	slices.Sort(extra)
	for _, name := range extra {
		if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return refusedLedgerWrite(err, name, written)
		}
	}
	fmt.Fprintf(o.Streams.Out, "Restored %d ledger ConfigMaps in %s, deleted %d the backup does not have\n", written, o.Connect.Namespace, len(extra))
	return nil
}

// refusedLedgerWrite explains a refused write of the ledger.
func refusedLedgerWrite(err error, name string, written int) error {
	done := ""
	if written > 0 {
		done = fmt.Sprintf(" (%d ConfigMaps were already written: run restore again once fixed)", written)
	}
	if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
		return fmt.Errorf("writing ledger ConfigMap %s: %w%s; only ipam and the group %s may write the ledger: add --as=<you> --as-group=%s (docs/security.md)",
			name, err, done, breakGlass, breakGlass)
	}
	return fmt.Errorf("writing ledger ConfigMap %s: %w%s", name, err, done)
}

// backupList is a backup: a v1 List of the ledger's ConfigMaps.
type backupList struct {
	APIVersion string             `json:"apiVersion"`
	Kind       string             `json:"kind"`
	Items      []corev1.ConfigMap `json:"items"`
}

// parseBackup reads a backup and checks it is a whole ledger of namespace.
func parseBackup(raw []byte, source, namespace string) ([]corev1.ConfigMap, error) {
	var list backupList
	if err := yaml.UnmarshalStrict(raw, &list); err != nil {
		return nil, fmt.Errorf("%s: not a backup of the ledger (a v1 List of ConfigMaps): %w", source, err)
	}
	if list.Kind != "List" || len(list.Items) == 0 {
		return nil, fmt.Errorf("%s: kind %q with %d items; a backup is a List of the ledger's ConfigMaps, written by `kubectl ipledger ledger backup`", source, list.Kind, len(list.Items))
	}
	head := false
	for i, cm := range list.Items {
		n, ok := strings.CutPrefix(cm.Name, ledgerPrefix)
		if _, err := strconv.Atoi(n); !ok || err != nil || cm.Kind != "ConfigMap" {
			return nil, fmt.Errorf("%s: items[%d] is %s %q, not a ledger ConfigMap %s<n>", source, i, cm.Kind, cm.Name, ledgerPrefix)
		}
		if cm.Namespace != "" && cm.Namespace != namespace {
			return nil, fmt.Errorf("%s: items[%d] %s is of namespace %s, and ipam's is %s (--ipam-namespace)", source, i, cm.Name, cm.Namespace, namespace)
		}
		if cm.Labels[ledgerLabel] != "true" || cm.Data["format"] != ledgerFormat {
			return nil, fmt.Errorf("%s: items[%d] %s lacks the label %s=true or the format %q: not written by ipam", source, i, cm.Name, ledgerLabel, ledgerFormat)
		}
		list.Items[i].Namespace = namespace
		head = head || n == "0"
	}
	if !head {
		return nil, fmt.Errorf("%s: no %s0, the head that lists the other shards", source, ledgerPrefix)
	}
	return list.Items, nil
}

// listLedger lists the ledger ConfigMaps of namespace, by name.
func listLedger(ctx context.Context, client kubernetes.Interface, namespace string) ([]corev1.ConfigMap, error) {
	list, err := client.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{LabelSelector: ledgerLabel + "=true"})
	if err != nil {
		return nil, fmt.Errorf("listing the ledger ConfigMaps of %s: %w", namespace, err)
	}
	items := list.Items
	slices.SortFunc(items, func(a, b corev1.ConfigMap) int { return strings.Compare(a.Name, b.Name) })
	return items, nil
}

// kubeClient is a client for the kubeconfig flags (--as and --as-group
// included).
func (o *Options) kubeClient() (kubernetes.Interface, error) {
	cfg, err := o.Kube.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return kubernetes.NewForConfig(cfg)
}
