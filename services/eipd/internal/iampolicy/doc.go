// Package iampolicy holds the test of the IAM policy eipd ships
// (deploy/aws/eipd-iam-policy.json) against the EC2 actions its code calls
// (awsec2.API). moto does not evaluate IAM, so the document itself is
// checked: every action eipd calls is allowed, every mutating one only with
// the cluster tag condition, and nothing else is granted.
package iampolicy
