-- Plans set before PAYMENT_METHOD_REQUIRED was enforced defaulted to 'none' without it meaning
-- anything: those orgs ran priced models. Keep them running after the upgrade; an operator who
-- wants the rule for an org sets `plan set --payment-method none` again.
UPDATE `plans` SET `payment_method` = 'card' WHERE `payment_method` = 'none';
